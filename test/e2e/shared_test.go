package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/simulator"
)

// sharedMembers is the size of the shared fleet: the most members a sharing scenario asks for.
const sharedMembers = 5

// shared is the one fleet most scenarios share, as Flux's suites share one envtest: started by the
// first scenario that asks for it, stopped by TestMain when every test has run. Each scenario has a
// namespace of its own on the hub (its FleetClusters, kubeconfig Secrets, sources, rollouts,
// Kustomizations and receipts) and the same namespace on the members, where its package is applied
// (the rollout template's targetNamespace); its manager caches only that namespace, and its faults
// name that namespace's workloads. What the scenarios share: the API servers, source-controller,
// kustomize-controller, the Git server, the registry and one workload simulator.
//
// A scenario that needs faults between its clients and an API server gets proxies of its own in
// front of the shared one (newFleetSetupProxied): only its namespace's clients go through them. A
// scenario that reaches across namespaces keeps a fleet of its own (newFleetSetupWith, at most
// maxOwnFleets at once), and says why where it starts it: a source-controller restart or its
// retention flags, members that trust the hub's tokens, cluster-scoped objects on the members,
// golden transcripts that name the namespace.
var shared struct {
	mu      sync.Mutex
	started bool
	f       *localfleet.Fleet
	sim     *simulator.Simulator
	stopSim func()
	err     error
	names   map[string]bool
}

// sharedFleet returns the shared fleet and its simulator, starting them on first use.
func sharedFleet(t *testing.T) (*localfleet.Fleet, *simulator.Simulator) {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.started {
		shared.started = true
		began := time.Now()
		shared.f, shared.sim, shared.stopSim, shared.err = startShared()
		if shared.err == nil {
			t.Logf("localfleet: fleet started in %.1fs (hub and %d members, shared)", time.Since(began).Seconds(), sharedMembers)
		}
	}
	if shared.err != nil {
		t.Fatalf("starting the shared fleet: %v", shared.err)
	}
	return shared.f, shared.sim
}

func startShared() (*localfleet.Fleet, *simulator.Simulator, func(), error) {
	// As localfleet.StartForTest gives a fleet: twenty minutes for a start slot, eight to start.
	ctx, cancel := context.WithTimeout(context.Background(), 28*time.Minute)
	defer cancel()
	f, err := localfleet.Start(ctx, localfleet.Options{
		Members: sharedMembers,
		// Every sharing scenario's sources and Kustomizations go through these two: enough workers
		// that one scenario's health check waiting out its timeout holds up no other.
		SourceControllerArgs:    []string{"--concurrent=10"},
		KustomizeControllerArgs: []string{"--concurrent=40"},
	})
	if err != nil {
		if f != nil {
			f.DumpLogs(os.Stderr, 80)
			f.Stop()
		}
		return nil, nil, nil, err
	}
	sim, stopSim := startSimulator(f)
	return f, sim, stopSim, nil
}

// stopShared stops the shared fleet, if it was started.
func stopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.f == nil {
		return
	}
	shared.stopSim()
	shared.f.Stop()
}

// maxOwnFleets is how many scenarios of this process run a fleet of their own at once. A fleet of
// its own is a hub and up to five members (each a kube-apiserver and an etcd), kube-controller-
// manager and two Flux controllers, busy for as long as its scenario runs; a scenario on the shared
// fleet adds only its controller and its objects. So many scenarios can run at once (-e2e.parallel,
// the Makefile's E2E_PARALLEL) when they share, while those of their own wait here for a slot,
// having given their turn to another (schedule_test.go), rather than start many API servers at
// once on a small machine.
const maxOwnFleets = 2

var (
	ownFleets    = make(chan struct{}, maxOwnFleets)
	ownFleetHeld sync.Map // *testing.T → true while it holds a slot
)

// ownFleetSlot waits for one of the maxOwnFleets slots and holds it until t ends (its fleet stopped:
// cleanups run last registered first, so call it before starting the fleet). A scenario whose
// deadline starts before its fleet does takes its slot first; newFleetSetupWith then takes none.
func ownFleetSlot(t *testing.T) {
	t.Helper()
	if _, held := ownFleetHeld.LoadOrStore(t, true); held {
		return
	}
	began := time.Now()
	select {
	case ownFleets <- struct{}{}:
	default:
		// No slot: the scenario gives its turn to run (parallel) to another while it waits, and
		// takes one back, before any scenario not yet started, once it has its slot.
		endTurn()
		ownFleets <- struct{}{}
		waitTurn(-1)
	}
	if waited := time.Since(began); waited > time.Second {
		t.Logf("schedule: waited %.1fs for one of %d own-fleet slots", waited.Seconds(), maxOwnFleets)
	}
	t.Cleanup(func() { <-ownFleets; ownFleetHeld.Delete(t) })
}

var notInName = regexp.MustCompile(`[^a-z0-9]+`)

// testNamespace is t's namespace on the shared fleet's hub and members: its name without TestE2E,
// lower-cased, unique in the process.
func testNamespace(t *testing.T) string {
	t.Helper()
	name := strings.TrimPrefix(t.Name(), "TestE2E")
	ns := strings.Trim(notInName.ReplaceAllString(strings.ToLower(name), "-"), "-")
	ns = strings.TrimRight("e2e-"+ns[:min(len(ns), 50)], "-")
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.names == nil {
		shared.names = map[string]bool{}
	}
	if shared.names[ns] {
		t.Fatalf("namespace %s is taken by another test: rename the test", ns)
	}
	shared.names[ns] = true
	return ns
}

// retire leaves nothing of a finished scenario at work on the shared fleet: its Kustomizations,
// HelmReleases and sources are suspended, so the Flux controllers no longer reconcile them
// (each every minute, its Git repository every two seconds, for as long as the package runs), and
// its workloads are deleted from the members, so the simulator's passes no longer list them. Its
// objects stay on the hub for what a failure prints. Without it, the scenarios that had ended made
// most of the shared hub's work: about a hundred Kustomizations re-reconciling, twelve status writes
// a second.
func (s *fleetSetup) retire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	suspend := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`))
	lists := []client.ObjectList{&kustomizev1.KustomizationList{}, &helmv2.HelmReleaseList{}, &sourcev1.GitRepositoryList{}, &sourcev1.OCIRepositoryList{}}
	for _, l := range lists {
		err := s.f.Hub.List(ctx, l, client.InNamespace(s.ns))
		if apimeta.IsNoMatchError(err) {
			continue // HelmReleases, before a chart scenario started helm-controller on the hub
		}
		if err != nil {
			t.Logf("retiring %s: %v", s.ns, err)
			return
		}
		_ = apimeta.EachListItem(l, func(item runtime.Object) error {
			o := item.(client.Object)
			if err := s.f.Hub.Patch(ctx, o, suspend); client.IgnoreNotFound(err) != nil {
				t.Logf("retiring %s: suspending %T %s: %v", s.ns, o, o.GetName(), err)
			}
			return nil
		})
	}
	for _, m := range s.f.Members {
		for _, o := range []client.Object{&appsv1.Deployment{}, &appsv1.StatefulSet{}, &appsv1.DaemonSet{}} {
			if err := m.Client.DeleteAllOf(ctx, o, client.InNamespace(s.ns)); client.IgnoreNotFound(err) != nil {
				t.Logf("retiring %s: deleting %T on %s: %v", s.ns, o, m.Name, err)
			}
		}
	}
}

// dumpSharedLogs prints, for a failed scenario on the shared fleet, its controller's log and the
// lines of the shared processes' logs that name its namespace (the last lines of each).
func dumpSharedLogs(t *testing.T, f *localfleet.Fleet, ns string) {
	const lines = 120
	tail(t, filepath.Join(f.Dir, "logs", "tidegate-controller-"+ns+".log"), "", lines)
	for _, name := range []string{"source-controller.log", "kustomize-controller.log", "helm-controller.log", "simulator.log", "hub-kube-apiserver.log"} {
		tail(t, filepath.Join(f.Dir, "logs", name), ns, lines)
	}
}

// tail logs the last n lines of the file at path that contain match.
func tail(t *testing.T, path, match string, n int) {
	file, err := os.Open(path)
	if err != nil {
		return
	}
	defer file.Close()
	var kept []string
	in := bufio.NewScanner(file)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		if strings.Contains(in.Text(), match) {
			kept = append(kept, in.Text())
			if len(kept) > n {
				kept = kept[1:]
			}
		}
	}
	t.Logf("===== %s (last %d lines naming %q) =====\n%s", filepath.Base(path), len(kept), match, strings.Join(kept, "\n"))
}

// faults sets the simulator's faults on the workloads of one scenario's namespace only, so that
// scenarios sharing members and a simulator do not reach each other's workloads.
type faults struct {
	sim *simulator.Simulator
	ns  string

	mu  sync.Mutex
	set map[string][]string // cluster → the keys set there
}

// SetFault sets f on cluster for the workload f.Workload names in the scenario's namespace.
func (fs *faults) SetFault(cluster string, f simulator.Fault) {
	if f.Workload == "" || strings.Contains(f.Workload, "/") {
		panic(fmt.Sprintf("a scenario's fault names one workload of its namespace, not %q", f.Workload))
	}
	f.Workload = fs.ns + "/" + f.Workload
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.set == nil {
		fs.set = map[string][]string{}
	}
	fs.set[cluster] = append(fs.set[cluster], f.Workload)
	fs.sim.SetFault(cluster, f)
}

// ClearFaults removes every fault the scenario set on cluster.
func (fs *faults) ClearFaults(cluster string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, key := range fs.set[cluster] {
		fs.sim.ClearFault(cluster, key)
	}
	delete(fs.set, cluster)
}
