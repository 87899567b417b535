package simulator

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// These tests replay the simulator's decisions on a fake clock, without an API server, and judge every
// status with kstatus — the library kustomize-controller's health checks use (fluxcd/cli-utils; its
// pkg/kstatus/status is the same in v1.2.3, which kustomize-controller v1.9.6 builds with, and v1.3.0).

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// replay drives one workload through passes at chosen times, as pass does, minus the API server.
type replay struct {
	t     *testing.T
	m     *member
	fault *activeFault
	nodes int32
}

func newReplay(t *testing.T) *replay {
	return &replay{t: t, m: &member{name: "member-1", tracked: map[string]*tracked{}}, nodes: 1}
}

func (r *replay) setFault(f Fault, at time.Time) { r.fault = &activeFault{Fault: f, since: at} }

// pass computes obj's next status at now, stores it as the API server would (JSON, times to the second)
// and returns its kstatus and whether the status changed.
func (r *replay) pass(obj client.Object, now time.Time) (status.Status, bool) {
	r.t.Helper()
	seen := map[string]bool{}
	var changed bool
	switch o := obj.(type) {
	case *appsv1.Deployment:
		tr := r.m.track("Deployment", o, seen, now, deploymentRolledOut(o))
		st := roundTrip(r.t, deploymentStatus(o, tr.assess(r.fault, replicas(o.Spec.Replicas), progressDeadline(o), now), now))
		changed = !equality.Semantic.DeepEqual(o.Status, st)
		o.Status = st
	case *appsv1.StatefulSet:
		tr := r.m.track("StatefulSet", o, seen, now, statefulSetRolledOut(o))
		st := roundTrip(r.t, statefulSetStatus(o, tr.assess(r.fault, replicas(o.Spec.Replicas), 0, now)))
		changed = !equality.Semantic.DeepEqual(o.Status, st)
		o.Status = st
	case *appsv1.DaemonSet:
		tr := r.m.track("DaemonSet", o, seen, now, daemonSetRolledOut(o, r.nodes))
		st := roundTrip(r.t, daemonSetStatus(o, r.nodes, tr.assess(r.fault, r.nodes, 0, now)))
		changed = !equality.Semantic.DeepEqual(o.Status, st)
		o.Status = st
	default:
		r.t.Fatalf("replay of %T", obj)
	}
	return kstatusOf(r.t, obj), changed
}

func roundTrip[T any](t *testing.T, v T) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// kstatusOf computes obj's kstatus as kustomize-controller would from the object it reads.
func kstatusOf(t *testing.T, obj client.Object) status.Status {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	us := &unstructured.Unstructured{Object: u}
	gvk, err := apiutil.GVKForObject(obj, clientgoscheme.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	us.SetGroupVersionKind(gvk)
	res, err := status.Compute(us)
	if err != nil {
		t.Fatalf("kstatus of %s: %v", obj.GetName(), err)
	}
	return res.Status
}

func ptr[T any](v T) *T { return &v }

func template(image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
	}
}

// meta is what the API server gives every new object.
func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "demo", UID: types.UID(name + "-uid"), Generation: 1}
}

// selector selects the pods of template, as the API server requires of every workload.
var selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}

func deployment(replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: meta("web"), Spec: appsv1.DeploymentSpec{
		Replicas: ptr(replicas), ProgressDeadlineSeconds: ptr(int32(60)), Template: template("web:1"), Selector: selector,
	}}
}

func statefulSet(replicas int32) *appsv1.StatefulSet {
	// The API server defaults a RollingUpdate partition of 0, which sends kstatus down its partition branch.
	return &appsv1.StatefulSet{ObjectMeta: meta("db"), Spec: appsv1.StatefulSetSpec{
		Replicas: ptr(replicas), Template: template("db:1"), Selector: selector,
		UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
			Type:          appsv1.RollingUpdateStatefulSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr(int32(0))},
		},
	}}
}

func daemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: meta("agent"), Spec: appsv1.DaemonSetSpec{Template: template("agent:1"), Selector: selector}}
}

// newRevision changes obj's pod template as a rollout does, bumping the generation like the API server.
func newRevision(obj client.Object, image string) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		o.Spec.Template = template(image)
	case *appsv1.StatefulSet:
		o.Spec.Template = template(image)
	case *appsv1.DaemonSet:
		o.Spec.Template = template(image)
	}
	obj.SetGeneration(obj.GetGeneration() + 1)
}

func workloads() map[string]func() client.Object {
	return map[string]func() client.Object{
		"Deployment":             func() client.Object { return deployment(3) },
		"Deployment scaled to 0": func() client.Object { return deployment(0) },
		"StatefulSet":            func() client.Object { return statefulSet(2) },
		"StatefulSet no partition": func() client.Object {
			s := statefulSet(2)
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{}
			return s
		},
		"DaemonSet": func() client.Object { return daemonSet() },
	}
}

func TestHealthyWorkloadIsCurrentAtOnceAndStaysUnwritten(t *testing.T) {
	for name, mk := range workloads() {
		t.Run(name, func(t *testing.T) {
			r, obj := newReplay(t), mk()
			if got := kstatusOf(t, obj); got == status.CurrentStatus {
				t.Fatalf("a workload without status is already %s: the test cannot tell the simulator did anything", got)
			}
			if got, changed := r.pass(obj, t0); got != status.CurrentStatus || !changed {
				t.Fatalf("first pass: kstatus %s, changed %v; want Current, changed", got, changed)
			}
			// Later passes over the unchanged object must compute exactly the stored status: any difference
			// would be a write every Interval.
			for _, at := range []time.Duration{300 * time.Millisecond, 2 * time.Second, time.Hour} {
				if got, changed := r.pass(obj, t0.Add(at)); got != status.CurrentStatus || changed {
					t.Fatalf("pass at +%s: kstatus %s, changed %v; want Current, unchanged", at, got, changed)
				}
			}
			newRevision(obj, "v2")
			if got, changed := r.pass(obj, t0.Add(2*time.Hour)); got != status.CurrentStatus || !changed {
				t.Fatalf("new revision: kstatus %s, changed %v; want Current, changed", got, changed)
			}
		})
	}
}

func TestNeverAvailable(t *testing.T) {
	for name, mk := range workloads() {
		if name == "Deployment scaled to 0" {
			continue // see TestFaultsSpareWorkloadsWithoutPods
		}
		t.Run(name, func(t *testing.T) {
			r, obj := newReplay(t), mk()
			r.setFault(Fault{Mode: NeverAvailable}, t0)
			for _, at := range []time.Duration{0, time.Second, 10 * time.Minute} {
				if got, _ := r.pass(obj, t0.Add(at)); got == status.CurrentStatus {
					t.Fatalf("pass at +%s: kstatus Current for a workload whose pods never become ready", at)
				}
			}
		})
	}
}

func TestNeverAvailableDeploymentFailsAfterItsProgressDeadline(t *testing.T) {
	r, d := newReplay(t), deployment(3)
	r.setFault(Fault{Mode: NeverAvailable}, t0)
	if got, _ := r.pass(d, t0); got != status.InProgressStatus {
		t.Fatalf("within the deadline: kstatus %s, want InProgress", got)
	}
	if got, _ := r.pass(d, t0.Add(61*time.Second)); got != status.FailedStatus {
		t.Fatalf("past the 60s deadline: kstatus %s, want Failed (ProgressDeadlineExceeded)", got)
	}
	r.fault = nil
	if got, _ := r.pass(d, t0.Add(62*time.Second)); got != status.CurrentStatus {
		t.Fatalf("fault cleared: kstatus %s, want Current", got)
	}
}

func TestNeverAvailableOnARolledOutDeploymentDropsAvailabilityButNotProgress(t *testing.T) {
	r, d := newReplay(t), deployment(3)
	r.pass(d, t0)
	r.setFault(Fault{Mode: NeverAvailable}, t0.Add(time.Minute))
	if got, _ := r.pass(d, t0.Add(time.Hour)); got != status.InProgressStatus {
		t.Fatalf("kstatus %s, want InProgress", got)
	}
	// A real Deployment whose pods crash after its rollout keeps Progressing=NewReplicaSetAvailable and
	// never hits its progress deadline: only Available goes False.
	if c := cond(d, appsv1.DeploymentProgressing); c.Reason != reasonNewReplicaSetAvailable {
		t.Errorf("Progressing reason %q, want %q", c.Reason, reasonNewReplicaSetAvailable)
	}
	if c := cond(d, appsv1.DeploymentAvailable); c.Status != corev1.ConditionFalse || d.Status.AvailableReplicas != 0 {
		t.Errorf("Available %s with %d available replicas, want False with 0", c.Status, d.Status.AvailableReplicas)
	}
}

func cond(d *appsv1.Deployment, t appsv1.DeploymentConditionType) appsv1.DeploymentCondition {
	for _, c := range d.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return appsv1.DeploymentCondition{}
}

func TestLoseAvailability(t *testing.T) {
	for name, mk := range workloads() {
		if name == "Deployment scaled to 0" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			r, obj := newReplay(t), mk()
			r.setFault(Fault{Mode: LoseAvailability, After: 30 * time.Second}, t0)
			if got, _ := r.pass(obj, t0); got != status.CurrentStatus {
				t.Fatalf("at first: kstatus %s, want Current", got)
			}
			if got, _ := r.pass(obj, t0.Add(29*time.Second)); got != status.CurrentStatus {
				t.Fatalf("before After: kstatus %s, want Current", got)
			}
			if got, changed := r.pass(obj, t0.Add(30*time.Second)); got == status.CurrentStatus || !changed {
				t.Fatalf("after After: kstatus %s, changed %v; want not Current, changed", got, changed)
			}
			if _, changed := r.pass(obj, t0.Add(40*time.Second)); changed {
				t.Fatal("an unchanged lost workload was written again")
			}
			r.fault = nil
			if got, _ := r.pass(obj, t0.Add(50*time.Second)); got != status.CurrentStatus {
				t.Fatalf("fault cleared: kstatus %s, want Current", got)
			}
		})
	}
}

func TestLoseAvailabilityCountsFromSetFaultOnALongHealthyWorkload(t *testing.T) {
	r, d := newReplay(t), deployment(3)
	r.pass(d, t0)
	set := t0.Add(time.Hour)
	r.setFault(Fault{Mode: LoseAvailability, After: 30 * time.Second}, set)
	if got, _ := r.pass(d, set.Add(time.Second)); got != status.CurrentStatus {
		t.Fatalf("just after SetFault: kstatus %s, want Current (After counts from SetFault)", got)
	}
	if got, _ := r.pass(d, set.Add(31*time.Second)); got == status.CurrentStatus {
		t.Fatal("After elapsed since SetFault: still Current")
	}
}

func TestSlowIsSlowAgainForEachNewRevision(t *testing.T) {
	for name, mk := range workloads() {
		if name == "Deployment scaled to 0" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			r, obj := newReplay(t), mk()
			r.setFault(Fault{Mode: Slow, Delay: 20 * time.Second}, t0)
			if got, _ := r.pass(obj, t0); got == status.CurrentStatus {
				t.Fatal("at once: Current, want not yet")
			}
			if got, _ := r.pass(obj, t0.Add(19*time.Second)); got == status.CurrentStatus {
				t.Fatal("before the delay: Current, want not yet")
			}
			if got, _ := r.pass(obj, t0.Add(20*time.Second)); got != status.CurrentStatus {
				t.Fatalf("after the delay: kstatus %s, want Current", got)
			}
			// The rolled-out generation stays healthy: Slow delays rollouts, it does not break them.
			if got, _ := r.pass(obj, t0.Add(25*time.Second)); got != status.CurrentStatus {
				t.Fatalf("rolled out: kstatus %s, want Current", got)
			}
			newRevision(obj, "v2")
			next := t0.Add(time.Minute)
			if got, _ := r.pass(obj, next); got == status.CurrentStatus {
				t.Fatal("new revision at once: Current, want slow again")
			}
			if got, _ := r.pass(obj, next.Add(20*time.Second)); got != status.CurrentStatus {
				t.Fatalf("new revision after the delay: kstatus %s, want Current", got)
			}
		})
	}
}

func TestSlowStatefulSetKeepsItsOldRevisionCurrentUntilRolledOut(t *testing.T) {
	r, s := newReplay(t), statefulSet(2)
	r.pass(s, t0)
	old := s.Status.CurrentRevision
	r.setFault(Fault{Mode: Slow, Delay: time.Minute}, t0)
	newRevision(s, "db:2")
	r.pass(s, t0.Add(time.Second))
	if s.Status.CurrentRevision != old || s.Status.UpdateRevision == old {
		t.Fatalf("mid-rollout revisions current=%q update=%q, want current=%q and a new update revision",
			s.Status.CurrentRevision, s.Status.UpdateRevision, old)
	}
	r.pass(s, t0.Add(2*time.Minute))
	if s.Status.CurrentRevision != s.Status.UpdateRevision || s.Status.CurrentRevision == old {
		t.Fatalf("rolled out: current=%q update=%q, want both the new revision", s.Status.CurrentRevision, s.Status.UpdateRevision)
	}
}

func TestFaultsSpareWorkloadsWithoutPods(t *testing.T) {
	for _, f := range []Fault{{Mode: NeverAvailable}, {Mode: Slow, Delay: time.Hour}, {Mode: LoseAvailability}} {
		t.Run(string(f.Mode), func(t *testing.T) {
			r, d := newReplay(t), deployment(0)
			r.setFault(f, t0)
			for _, at := range []time.Duration{0, time.Minute} {
				if got, _ := r.pass(d, t0.Add(at)); got != status.CurrentStatus {
					t.Fatalf("pass at +%s: kstatus %s of a Deployment scaled to 0, want Current", at, got)
				}
			}
		})
	}
}

func TestSimulatorStartedNextToAHealthyWorkloadDoesNotReplayItsRollout(t *testing.T) {
	first, d := newReplay(t), deployment(3)
	first.pass(d, t0)
	// A new simulator (a restarted sandbox) with a Slow fault sees the same, already rolled-out generation.
	second := newReplay(t)
	second.setFault(Fault{Mode: Slow, Delay: time.Hour}, t0)
	if got, changed := second.pass(d, t0.Add(time.Minute)); got != status.CurrentStatus || changed {
		t.Fatalf("kstatus %s, changed %v; want Current, unchanged", got, changed)
	}
}

func TestConditionTimesMoveOnlyWhenTheConditionDoes(t *testing.T) {
	r, d := newReplay(t), deployment(1)
	r.setFault(Fault{Mode: Slow, Delay: 10 * time.Second}, t0)
	r.pass(d, t0)
	progressing := cond(d, appsv1.DeploymentProgressing)
	r.pass(d, t0.Add(5*time.Second))
	if c := cond(d, appsv1.DeploymentProgressing); !c.LastUpdateTime.Equal(&progressing.LastUpdateTime) {
		t.Fatalf("unchanged Progressing got a new lastUpdateTime %s (was %s)", c.LastUpdateTime, progressing.LastUpdateTime)
	}
	r.pass(d, t0.Add(10*time.Second))
	c := cond(d, appsv1.DeploymentProgressing)
	if c.Reason != reasonNewReplicaSetAvailable || !c.LastTransitionTime.Equal(&progressing.LastTransitionTime) ||
		!c.LastUpdateTime.Time.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("rolled-out Progressing %+v: want reason %s, the first transition time and a new update time",
			c, reasonNewReplicaSetAvailable)
	}
	if a := cond(d, appsv1.DeploymentAvailable); !a.LastTransitionTime.Time.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("Available turned True at %s, want %s", a.LastTransitionTime, t0.Add(10*time.Second))
	}
}

func TestFaultForPrefersTheNamedWorkload(t *testing.T) {
	s := New(map[string]client.Client{"member-1": nil, "member-2": nil}, Options{})
	s.SetFault("member-1", Fault{Mode: Slow, Delay: time.Second})
	s.SetFault("member-1", Fault{Workload: "web", Mode: NeverAvailable})
	s.SetFault("member-1", Fault{Workload: "other/web", Mode: LoseAvailability})
	for _, c := range []struct {
		cluster, ns, name string
		want              Mode
	}{
		{"member-1", "demo", "web", NeverAvailable},
		{"member-1", "other", "web", LoseAvailability},
		{"member-1", "demo", "db", Slow},
		{"member-2", "demo", "web", ""},
	} {
		var got Mode
		if f := s.faultFor(c.cluster, c.ns, c.name); f != nil {
			got = f.Mode
		}
		if got != c.want {
			t.Errorf("fault for %s %s/%s: %q, want %q", c.cluster, c.ns, c.name, got, c.want)
		}
	}
	s.ClearFault("member-1", "web")
	if f := s.faultFor("member-1", "demo", "web"); f == nil || f.Mode != Slow {
		t.Errorf("after ClearFault of web: %+v, want the cluster-wide Slow", f)
	}
	s.ClearFaults("member-1")
	if f := s.faultFor("member-1", "other", "web"); f != nil {
		t.Errorf("after ClearFaults: %+v, want none", f)
	}
}

func TestSetFaultPanicsOnMistakes(t *testing.T) {
	s := New(map[string]client.Client{"member-1": nil}, Options{})
	for name, f := range map[string]func(){
		"unknown cluster":         func() { s.SetFault("member-9", Fault{Mode: Slow}) },
		"unknown mode":            func() { s.SetFault("member-1", Fault{Mode: "Flaky"}) },
		"error ratio above 1":     func() { s.SetFault("member-1", Fault{ErrorRatio: 1.5}) },
		"negative error ratio":    func() { s.SetFault("member-1", Fault{ErrorRatio: -0.1}) },
		"error ratio NaN":         func() { s.SetFault("member-1", Fault{ErrorRatio: math.NaN()}) },
		"negative latency factor": func() { s.SetFault("member-1", Fault{LatencyFactor: -1}) },
		"infinite latency factor": func() { s.SetFault("member-1", Fault{LatencyFactor: math.Inf(1)}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

func TestFaultLimitedToAnImage(t *testing.T) {
	s := New(map[string]client.Client{"member-1": nil}, Options{})
	s.SetFault("member-1", Fault{Workload: "web", Mode: NeverAvailable, Image: ":v2"})
	if f := s.faultFor("member-1", "demo", "web", "ghcr.io/example/web:v1"); f != nil {
		t.Errorf("the v1 image must stay healthy, got fault %+v", f)
	}
	if f := s.faultFor("member-1", "demo", "web", "sidecar:v1", "ghcr.io/example/web:v2"); f == nil || f.Mode != NeverAvailable {
		t.Errorf("a template with the v2 image must get the fault, got %+v", f)
	}
}
