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
// A scenario that reaches across namespaces keeps a fleet of its own (newFleetSetupWith), and says
// why where it starts it: fault proxies in front of an API server, a source-controller restart or
// its retention flags, members that trust the hub's tokens, cluster-scoped objects on the members,
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
		KustomizeControllerArgs: []string{"--concurrent=30"},
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

// dumpSharedLogs prints, for a failed scenario on the shared fleet, its controller's log and the
// lines of the shared processes' logs that name its namespace (the last lines of each).
func dumpSharedLogs(t *testing.T, f *localfleet.Fleet, ns string) {
	const lines = 120
	tail(t, filepath.Join(f.Dir, "logs", "tidegate-controller-"+ns+".log"), "", lines)
	for _, name := range []string{"source-controller.log", "kustomize-controller.log", "simulator.log", "hub-kube-apiserver.log"} {
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
