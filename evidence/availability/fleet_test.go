package availability

import (
	"context"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/simulator"
)

// Sampling a real member API server (kube-apiserver and etcd, no nodes) whose workload status the
// simulator moves, with faults injected: what the engine will see during a soak.

const (
	every     = 200 * time.Millisecond
	waitLimit = 30 * time.Second
)

func TestSamplingAMemberAPIServer(t *testing.T) {
	f := localfleet.StartForTest(t, localfleet.Options{Members: 1, NoFlux: true})
	m := f.Members[0]
	sim := simulator.New(map[string]client.Client{m.Name: m.Client}, simulator.Options{Interval: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	sim.Start(ctx)
	t.Cleanup(func() { sim.Stop(); cancel() })

	t.Run("healthy workloads are fully available", func(t *testing.T) {
		ns := namespace(t, m.Client)
		create(t, m.Client, deployment(ns, "web", 2), statefulSet(ns, "db", 2), daemonSet(ns, "agent"))
		// The workloads as the Kustomization's inventory lists them, with a Service to leave out.
		ws, err := WorkloadsFromInventory(&kustomizev1.ResourceInventory{Entries: []kustomizev1.ResourceRef{
			{ID: ns + "_web_apps_Deployment", Version: "v1"},
			{ID: ns + "_web__Service", Version: "v1"},
			{ID: ns + "_db_apps_StatefulSet", Version: "v1"},
			{ID: ns + "_agent_apps_DaemonSet", Version: "v1"},
		}})
		if err != nil || len(ws) != 3 {
			t.Fatalf("workloads %v, %v", ws, err)
		}
		waitAvailable(t, m.Client, ws)

		s := New(Options{Interval: every})
		start := time.Now()
		sampleFor(t, s, m, ws, 2*time.Second, nil)
		got := s.Summary(m.Name, start, time.Now())
		logSummary(t, got)
		if got.Samples < 5 || got.MinAvailableRatio != 1 || got.UnavailableSeconds != 0 || got.Worst != nil || got.Errors != nil || got.Workloads != 3 {
			t.Fatalf("summary %+v", got)
		}
		if l := Limits(got); len(l) != 1 || !strings.HasPrefix(l[0], "workload availability sampled every 200ms; an outage shorter than") {
			t.Fatalf("limits %q", l)
		}
	})

	t.Run("a workload that loses availability", func(t *testing.T) {
		ns := namespace(t, m.Client)
		create(t, m.Client, deployment(ns, "web", 2))
		ws := []Workload{{Kind: KindDeployment, Namespace: ns, Name: "web"}}
		waitAvailable(t, m.Client, ws)

		sim.SetFault(m.Name, simulator.Fault{Workload: ns + "/web", Mode: simulator.LoseAvailability, After: time.Second})
		s := New(Options{Interval: every})
		start := time.Now()
		// At least 2s, and on until two samples in a row saw the outage.
		sampleFor(t, s, m, ws, 2*time.Second, func() bool {
			return s.Summary(m.Name, start, time.Time{}).UnavailableSeconds > 2*every.Seconds()
		})
		end := time.Now()
		got := s.Summary(m.Name, start, end)
		logSummary(t, got)
		if got.MinAvailableRatio != 0 || got.UnavailableSeconds <= 0 || got.UnavailableSeconds > end.Sub(start).Seconds()+every.Seconds() ||
			got.Worst == nil || got.Worst.Workload != ws[0] || got.Worst.Available != 0 || got.Worst.Desired != 2 {
			t.Fatalf("summary %+v (worst %+v)", got, got.Worst)
		}
		if got.ReadErrors != 0 || got.Missing != 0 {
			t.Fatalf("an unavailable workload is not a failed read: %+v", got)
		}
		// It was healthy for the first second.
		if early := s.Summary(m.Name, start, start.Add(500*time.Millisecond)); early.Samples == 0 || early.MinAvailableRatio != 1 {
			t.Fatalf("first half second: %+v", early)
		}
	})

	t.Run("a deleted workload is unavailable", func(t *testing.T) {
		ns := namespace(t, m.Client)
		web := deployment(ns, "web", 1)
		create(t, m.Client, web)
		ws := []Workload{{Kind: KindDeployment, Namespace: ns, Name: "web"}}
		waitAvailable(t, m.Client, ws)

		s := New(Options{Interval: every})
		start := time.Now()
		sampleFor(t, s, m, ws, time.Second, nil)
		if err := m.Client.Delete(context.Background(), web); err != nil {
			t.Fatalf("deleting web: %v", err)
		}
		deleted := time.Now()
		sampleFor(t, s, m, ws, time.Second, nil)
		got := s.Summary(m.Name, start, time.Now())
		logSummary(t, got)
		if got.MinAvailableRatio != 0 || got.Missing == 0 || got.UnavailableSeconds < time.Since(deleted).Seconds()-every.Seconds() {
			t.Fatalf("summary %+v", got)
		}
		wantErr := "Deployment " + ns + "/web not found on cluster " + m.Name
		if len(got.Errors) != 1 || !strings.HasPrefix(got.Errors[0], wantErr) {
			t.Fatalf("errors %q, want one starting %q", got.Errors, wantErr)
		}
		if before := s.Summary(m.Name, start, deleted); before.MinAvailableRatio != 1 || before.Missing != 0 {
			t.Fatalf("before the delete: %+v", before)
		}
	})

	t.Run("custom resources judged by health check expressions", func(t *testing.T) { testJudgedByExpressions(t, m) })
}

func logSummary(t *testing.T, s ClusterSummary) {
	t.Helper()
	t.Logf("samples %d, minAvailableRatio %v, unavailableSeconds %.2f, maxGap %s, readErrors %d, missing %d, errors %q; limits %q",
		s.Samples, s.MinAvailableRatio, s.UnavailableSeconds, s.MaxGap, s.ReadErrors, s.Missing, s.Errors, Limits(s))
}

// sampleFor observes ws on m every interval for at least d, then until done (nil: at once) or waitLimit.
func sampleFor(t *testing.T, s *Sampler, m *localfleet.Member, ws []Workload, d time.Duration, done func() bool) {
	t.Helper()
	start := time.Now()
	for {
		if err := s.Observe(context.Background(), m.Name, m.Client, ws, time.Now()); err != nil {
			t.Fatalf("observing: %v", err)
		}
		if time.Since(start) >= d && (done == nil || done()) {
			return
		}
		if time.Since(start) > waitLimit {
			t.Fatalf("after %s: %+v", waitLimit, s.Summary(m.Name, start, time.Time{}))
		}
		time.Sleep(every)
	}
}

// waitAvailable waits until every workload in ws is fully available.
func waitAvailable(t testing.TB, c client.Reader, ws []Workload) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		all := true
		for _, w := range ws {
			if r := read(context.Background(), c, "member", w, nil); r.failed || r.below() {
				all = false
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workloads %v not available after %s", ws, waitLimit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func namespace(t testing.TB, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "avail-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

func create(t testing.TB, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
}

func podTemplate(name string) (*metav1.LabelSelector, corev1.PodTemplateSpec) {
	labels := map[string]string{"app": name}
	return &metav1.LabelSelector{MatchLabels: labels}, corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "example.com/" + name + ":v1"}}},
	}
}

func deployment(ns, name string, n int32) *appsv1.Deployment {
	sel, tpl := podTemplate(name)
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Selector: sel, Template: tpl}}
}

func statefulSet(ns, name string, n int32) *appsv1.StatefulSet {
	sel, tpl := podTemplate(name)
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: &n, Selector: sel, Template: tpl, ServiceName: name}}
}

func daemonSet(ns, name string) *appsv1.DaemonSet {
	sel, tpl := podTemplate(name)
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DaemonSetSpec{Selector: sel, Template: tpl}}
}
