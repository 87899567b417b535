package simulator

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/test/testenv"
)

// One member API server (envtest: kube-apiserver and etcd, no nodes, no controllers — a member cluster as
// the sandbox has them), started in TestMain. envErr says why it is not there; every test that needs it
// fails with that error, it never skips.
var (
	memberClient client.Client
	envErr       error
)

const (
	cluster  = "member-1"
	interval = 100 * time.Millisecond
	waitFor  = 30 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithAPIServer(m, clientgoscheme.Scheme, 0, func(c client.Client, err error) {
		memberClient, envErr = c, err
	}))
}

// start returns a running simulator of the member and a fresh namespace for the test's workloads. Tests
// run one after another, each with its own simulator, so that one test's faults never reach another's
// workloads through a second simulator; faults name their workload as namespace/name for the same reason.
func start(t *testing.T) (*Simulator, string) {
	t.Helper()
	if envErr != nil {
		t.Fatalf("no member API server: %v", envErr)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sim-"}}
	if err := memberClient.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	s := New(map[string]client.Client{cluster: memberClient}, Options{Interval: interval})
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	t.Cleanup(func() { s.Stop(); cancel() })
	return s, ns.Name
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := memberClient.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

// observe reads obj anew and returns its kstatus.
func observe(t *testing.T, obj client.Object) status.Status {
	t.Helper()
	if err := memberClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatalf("reading %s: %v", obj.GetName(), err)
	}
	return kstatusOf(t, obj)
}

// waitUntil polls obj until its kstatus satisfies ok and returns the statuses seen on the way, in order.
func waitUntil(t *testing.T, obj client.Object, what string, ok func(status.Status) bool) []status.Status {
	t.Helper()
	var seen []status.Status
	deadline := time.Now().Add(waitFor)
	for {
		st := observe(t, obj)
		if len(seen) == 0 || seen[len(seen)-1] != st {
			seen = append(seen, st)
		}
		if ok(st) {
			return seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("%T %s never became %s; kstatus seen: %v; object: %+v", obj, obj.GetName(), what, seen, obj)
		}
		time.Sleep(interval / 2)
	}
}

func is(want status.Status) func(status.Status) bool {
	return func(s status.Status) bool { return s == want }
}
func isNot(want status.Status) func(status.Status) bool {
	return func(s status.Status) bool { return s != want }
}

// inNamespace puts the test fixtures of status_test.go into ns, without the fields only the API server sets.
func inNamespace[T client.Object](obj T, ns string) T {
	obj.SetNamespace(ns)
	obj.SetUID("")
	obj.SetGeneration(0)
	return obj
}

func TestOnAPIServerHealthyWorkloadsBecomeCurrentAndAreNotRewritten(t *testing.T) {
	s, ns := start(t)
	objs := []client.Object{
		inNamespace(deployment(3), ns), inNamespace(statefulSet(2), ns), inNamespace(daemonSet(), ns),
	}
	for _, o := range objs {
		create(t, o)
	}
	for _, o := range objs {
		waitUntil(t, o, "Current", is(status.CurrentStatus))
	}

	// No churn: neither the background passes nor one more pass write over unchanged objects. The wait
	// is longer than a second because the API stores times to the second: a condition time recomputed on
	// every pass would show only once the clock crosses into the next second.
	rvs := map[string]string{}
	for _, o := range objs {
		rvs[o.GetName()] = o.GetResourceVersion()
	}
	time.Sleep(time.Second + 5*interval)
	if n, err := s.Sync(context.Background(), cluster); err != nil || n != 0 {
		t.Fatalf("Sync over unchanged objects wrote %d statuses (err %v), want 0", n, err)
	}
	for _, o := range objs {
		if observe(t, o); o.GetResourceVersion() != rvs[o.GetName()] {
			t.Errorf("%s was rewritten with nothing changed: resourceVersion %s → %s", o.GetName(), rvs[o.GetName()], o.GetResourceVersion())
		}
	}

	// A new revision gets its status as promptly as the first.
	d := objs[0].(*appsv1.Deployment)
	d.Spec.Template = template("web:2")
	if err := memberClient.Update(context.Background(), d); err != nil {
		t.Fatalf("updating the Deployment: %v", err)
	}
	waitUntil(t, d, "Current at generation 2", func(st status.Status) bool {
		return st == status.CurrentStatus && d.Status.ObservedGeneration == 2
	})
}

func TestOnAPIServerNeverAvailableDeploymentFailsThenClearFaultRestoresIt(t *testing.T) {
	s, ns := start(t)
	d := inNamespace(deployment(2), ns)
	d.Spec.ProgressDeadlineSeconds = ptr(int32(2))
	s.SetFault(cluster, Fault{Workload: ns + "/web", Mode: NeverAvailable})
	create(t, d)

	seen := waitUntil(t, d, "Failed (progress deadline exceeded)", is(status.FailedStatus))
	for _, st := range seen {
		if st == status.CurrentStatus {
			t.Fatalf("a never-available Deployment was Current on the way: %v", seen)
		}
	}
	if d.Status.AvailableReplicas != 0 || d.Status.ReadyReplicas != 0 {
		t.Errorf("never-available Deployment has %d ready, %d available, want 0", d.Status.ReadyReplicas, d.Status.AvailableReplicas)
	}

	s.ClearFault(cluster, ns+"/web")
	waitUntil(t, d, "Current after ClearFault", is(status.CurrentStatus))
}

func TestOnAPIServerLoseAvailabilityGoesCurrentThenNot(t *testing.T) {
	s, ns := start(t)
	d := inNamespace(deployment(2), ns)
	sts := inNamespace(statefulSet(1), ns)
	s.SetFault(cluster, Fault{Mode: LoseAvailability, After: 2 * time.Second})
	create(t, d)
	create(t, sts)

	for _, o := range []client.Object{d, sts} {
		waitUntil(t, o, "Current at first", is(status.CurrentStatus))
	}
	for _, o := range []client.Object{d, sts} {
		waitUntil(t, o, "not Current once availability is lost", isNot(status.CurrentStatus))
	}
	if d.Status.AvailableReplicas != 0 || cond(d, appsv1.DeploymentAvailable).Status != corev1.ConditionFalse {
		t.Errorf("lost Deployment: %d available, Available=%s; want 0 and False",
			d.Status.AvailableReplicas, cond(d, appsv1.DeploymentAvailable).Status)
	}

	s.ClearFault(cluster, "")
	for _, o := range []client.Object{d, sts} {
		waitUntil(t, o, "Current after ClearFault", is(status.CurrentStatus))
	}
}

// The delay itself is counted on a fake clock (TestSlowIsSlowAgainForEachNewRevision); here an hour's
// delay holds each revision back pass after pass, and ending it lets the revision become Current.
func TestOnAPIServerSlowRevisionsBecomeCurrentOnlyAfterTheDelay(t *testing.T) {
	s, ns := start(t)
	ds := inNamespace(daemonSet(), ns)
	slow := func(delay time.Duration) { s.SetFault(cluster, Fault{Workload: "agent", Mode: Slow, Delay: delay}) }

	for rev, change := range []func(){
		func() { create(t, ds) },
		func() {
			ds.Spec.Template = template("agent:2")
			if err := memberClient.Update(context.Background(), ds); err != nil {
				t.Fatalf("updating the DaemonSet: %v", err)
			}
		},
	} {
		slow(time.Hour)
		change()
		// The simulator observes the generation promptly (status says so) but does not call it ready.
		waitUntil(t, ds, "observed", func(status.Status) bool { return ds.Status.ObservedGeneration == ds.Generation })
		for pass := range 3 {
			if _, err := s.Sync(context.Background(), cluster); err != nil {
				t.Fatalf("revision %d: Sync: %v", rev+1, err)
			}
			if st := observe(t, ds); st == status.CurrentStatus {
				t.Fatalf("revision %d: Current after %d more passes, want not within its hour's delay", rev+1, pass+1)
			}
		}
		slow(0) // the delay is up
		waitUntil(t, ds, "Current once the delay is up", is(status.CurrentStatus))
	}
}

// Several goroutines change faults and make passes at once, next to the background loop: each change
// is in force in the next pass, whoever makes it, and no pass fails.
func TestOnAPIServerFaultsChangeSafelyWhileRunning(t *testing.T) {
	s, ns := start(t)
	const workers, changes, replicas = 4, 10, 2
	var deps []*appsv1.Deployment
	for w := range workers {
		d := inNamespace(deployment(replicas), ns)
		d.Name = fmt.Sprintf("web-%d", w)
		create(t, d)
		deps = append(deps, d)
	}
	for _, d := range deps {
		waitUntil(t, d, "Current", is(status.CurrentStatus))
	}

	ctx := context.Background()
	done := make(chan struct{})
	go func() { // one goroutine changes the fault of a workload that does not exist, as fast as it can
		for {
			select {
			case <-done:
				return
			default:
				s.SetFault(cluster, Fault{Workload: ns + "/none", Mode: Slow, Delay: time.Hour})
				s.ClearFault(cluster, ns+"/none")
			}
		}
	}()
	var wg sync.WaitGroup
	for _, d := range deps {
		wg.Add(1)
		go func() { // and one per Deployment faults it on and off, making a pass after each change
			defer wg.Done()
			workload := ns + "/" + d.Name
			for i := range changes {
				faulty := i%2 == 0
				want := int32(replicas)
				if faulty {
					s.SetFault(cluster, Fault{Workload: workload, Mode: NeverAvailable})
					want = 0
				} else {
					s.ClearFault(cluster, workload)
				}
				if _, err := s.Sync(ctx, cluster); err != nil {
					t.Errorf("%s, change %d: Sync: %v", d.Name, i+1, err)
					return
				}
				got := &appsv1.Deployment{}
				if err := memberClient.Get(ctx, client.ObjectKeyFromObject(d), got); err != nil {
					t.Errorf("%s, change %d: reading it: %v", d.Name, i+1, err)
					return
				}
				if got.Status.AvailableReplicas != want {
					t.Errorf("%s, change %d (NeverAvailable %v): %d available after a Sync, want %d",
						d.Name, i+1, faulty, got.Status.AvailableReplicas, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	for _, d := range deps {
		waitUntil(t, d, "Current once its last fault is cleared", is(status.CurrentStatus))
	}
}

// stuckOnce is a member client whose first List never answers until its context ends, as a request on
// a connection to a stalled API server does.
type stuckOnce struct {
	client.Client
	once sync.Once
}

func (c *stuckOnce) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	stuck := false
	c.once.Do(func() { stuck = true })
	if stuck {
		<-ctx.Done()
		return ctx.Err()
	}
	return c.Client.List(ctx, list, opts...)
}

// A pass stuck on one request ends at PassTimeout and the loop goes on: the workload still becomes
// Current. Without the bound the loop would wait on that request for good.
func TestOnAPIServerAStuckRequestDoesNotStopTheLoop(t *testing.T) {
	if envErr != nil {
		t.Fatalf("no member API server: %v", envErr)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sim-"}}
	if err := memberClient.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	s := New(map[string]client.Client{cluster: &stuckOnce{Client: memberClient}}, Options{Interval: interval, PassTimeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	t.Cleanup(func() { s.Stop(); cancel() })
	d := inNamespace(deployment(2), ns.Name)
	create(t, d)
	waitUntil(t, d, "Current", is(status.CurrentStatus))
}
