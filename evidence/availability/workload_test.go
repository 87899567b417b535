package availability

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// What Observe reads from each kind, with a fake client: the reading logic, not an API server (the
// fleet test has a real one).

func i32(n int32) *int32 { return &n }

func meta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "demo", Name: name} }

func fakeReader(t *testing.T, fail map[string]error, objs ...client.Object) client.Reader {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := fail[key.Name]; err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
}

func TestObserveReadsEachKind(t *testing.T) {
	objs := []client.Object{
		&appsv1.Deployment{ObjectMeta: meta("web"), Spec: appsv1.DeploymentSpec{Replicas: i32(4)},
			Status: appsv1.DeploymentStatus{AvailableReplicas: 3, ReadyReplicas: 4}},
		&appsv1.Deployment{ObjectMeta: meta("default-replicas"), Status: appsv1.DeploymentStatus{AvailableReplicas: 1}},
		&appsv1.Deployment{ObjectMeta: meta("scaled-to-zero"), Spec: appsv1.DeploymentSpec{Replicas: i32(0)}},
		&appsv1.StatefulSet{ObjectMeta: meta("db"), Spec: appsv1.StatefulSetSpec{Replicas: i32(3), MinReadySeconds: 10},
			Status: appsv1.StatefulSetStatus{ReadyReplicas: 3, AvailableReplicas: 2}},
		// An API server that predates status.availableReplicas: ready pods are available ones.
		&appsv1.StatefulSet{ObjectMeta: meta("old"), Spec: appsv1.StatefulSetSpec{Replicas: i32(2)},
			Status: appsv1.StatefulSetStatus{ReadyReplicas: 2}},
		&appsv1.DaemonSet{ObjectMeta: meta("agent"), Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 5, NumberAvailable: 4, NumberReady: 5}},
	}
	cases := []struct {
		w         Workload
		available int32
		desired   int32
	}{
		{Workload{Kind: KindDeployment, Namespace: "demo", Name: "web"}, 3, 4},
		{Workload{Kind: KindDeployment, Namespace: "demo", Name: "default-replicas"}, 1, 1},
		{Workload{Kind: KindDeployment, Namespace: "demo", Name: "scaled-to-zero"}, 0, 0},
		{Workload{Kind: KindStatefulSet, Namespace: "demo", Name: "db"}, 2, 3},
		{Workload{Kind: KindStatefulSet, Namespace: "demo", Name: "old"}, 2, 2},
		{Workload{Kind: KindDaemonSet, Namespace: "demo", Name: "agent"}, 4, 5},
	}
	c := fakeReader(t, nil, objs...)
	for _, tc := range cases {
		r := read(context.Background(), c, cl, tc.w, nil)
		if r.err != nil || r.available != tc.available || r.desired != tc.desired {
			t.Errorf("%s: %+v, want %d/%d", tc.w, r, tc.available, tc.desired)
		}
	}

	s := New(Options{})
	ws := make([]Workload, len(cases))
	for i, tc := range cases {
		ws[i] = tc.w
	}
	if err := s.Observe(context.Background(), cl, c, ws, t0); err != nil {
		t.Fatal(err)
	}
	got := s.Summary(cl, time.Time{}, time.Time{})
	want := &Shortfall{Workload: Workload{Kind: KindStatefulSet, Namespace: "demo", Name: "db"}, Available: 2, Desired: 3, At: t0}
	if got.Samples != 1 || got.MinAvailableRatio != 2.0/3 || !reflect.DeepEqual(got.Worst, want) || got.Workloads != 6 || got.UnavailableSeconds != 5 {
		t.Fatalf("summary %+v (worst %+v)", got, got.Worst)
	}
}

// A missing workload, or one being deleted, is seen unavailable; one that cannot be read is a failed
// read: the sample says so, and nothing is assumed about its ratio.
func TestObserveCountsWhatItCannotSee(t *testing.T) {
	boom := errors.New("connection refused")
	now := metav1.Now()
	deleting := &appsv1.Deployment{ObjectMeta: meta("leaving"), Status: appsv1.DeploymentStatus{AvailableReplicas: 1}}
	deleting.DeletionTimestamp = &now
	deleting.Finalizers = []string{"example.com/hold"}
	c := fakeReader(t, map[string]error{"flaky": boom},
		&appsv1.Deployment{ObjectMeta: meta("flaky"), Status: appsv1.DeploymentStatus{AvailableReplicas: 1}}, deleting)
	ws := []Workload{
		{Kind: KindDeployment, Namespace: "demo", Name: "flaky"},
		{Kind: KindDeployment, Namespace: "demo", Name: "gone"},
		{Kind: KindDeployment, Namespace: "demo", Name: "leaving"},
		{Kind: "Job", Namespace: "demo", Name: "migrate"},
	}
	s := New(Options{})
	err := s.Observe(context.Background(), cl, c, ws, t0)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "reading Deployment demo/flaky on cluster member-1: connection refused") ||
		!strings.Contains(err.Error(), `unsupported workload kind "Job"`) || strings.Contains(err.Error(), "gone") {
		t.Fatalf("Observe returned %v", err)
	}
	got := s.Summary(cl, time.Time{}, time.Time{})
	wantErrs := []string{
		"Deployment demo/gone not found on cluster member-1: deployments.apps \"gone\" not found",
		"Deployment demo/leaving on cluster member-1 is being deleted",
		"reading Deployment demo/flaky on cluster member-1: connection refused",
		"reading Job demo/migrate on cluster member-1: unsupported workload kind \"Job\" (want Deployment, StatefulSet or DaemonSet)",
	}
	if got.Samples != 1 || got.MinAvailableRatio != 0 || got.ReadErrors != 2 || got.FailedSamples != 1 || got.Missing != 2 || !reflect.DeepEqual(got.Errors, wantErrs) {
		t.Fatalf("summary %+v\nerrors %q", got, got.Errors)
	}
	if got.Worst == nil || got.Worst.Workload.Name != "gone" {
		t.Fatalf("worst %+v", got.Worst)
	}

	// No client for the cluster: every workload is a failed read.
	if err := s.Observe(context.Background(), "member-2", nil, ws[:1], t0); err == nil || !strings.Contains(err.Error(), "no client") {
		t.Fatalf("Observe without a client: %v", err)
	}
	if got := s.Summary("member-2", time.Time{}, time.Time{}); got.Samples != 1 || got.MinAvailableRatio != 0 || got.ReadErrors != 1 || got.FailedSamples != 1 || got.Worst != nil {
		t.Fatalf("summary without a client %+v", got)
	}
}

func TestObserveRecordsNothingWhenItCannotStart(t *testing.T) {
	s := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Observe(ctx, cl, fakeReader(t, nil), []Workload{web}, t0); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), cl) {
		t.Fatalf("Observe with a done context: %v", err)
	}
	if err := s.Observe(context.Background(), "", fakeReader(t, nil), []Workload{web}, t0); err == nil {
		t.Fatal("Observe of an unnamed cluster succeeded")
	}
	if err := s.Observe(context.Background(), cl, fakeReader(t, nil), []Workload{web}, time.Time{}); err == nil {
		t.Fatal("Observe without a time succeeded")
	}
	if got := s.Clusters(); len(got) != 0 {
		t.Fatalf("clusters %q", got)
	}
}

func TestWorkloadsFromInventory(t *testing.T) {
	inv := &kustomizev1.ResourceInventory{Entries: []kustomizev1.ResourceRef{
		{ID: "demo_web_apps_Deployment", Version: "v1"},
		{ID: "demo_web__Service", Version: "v1"},
		{ID: "_demo__Namespace", Version: "v1"},
		{ID: "demo_db_apps_StatefulSet", Version: "v1"},
		{ID: "kube-system_agent_apps_DaemonSet", Version: "v1"},
		{ID: "demo_web-7d9f_apps_ReplicaSet", Version: "v1"},
		{ID: "demo_web_extensions_Deployment", Version: "v1beta1"},
		{ID: "demo_web_apps_Deployment", Version: "v1"},
		{ID: "_cluster-admin_rbac.authorization.k8s.io_ClusterRole", Version: "v1"},
		{ID: "garbage", Version: "v1"},
	}}
	got, err := WorkloadsFromInventory(inv)
	want := []Workload{
		{Kind: KindStatefulSet, Namespace: "demo", Name: "db"},
		{Kind: KindDeployment, Namespace: "demo", Name: "web"},
		{Kind: KindDaemonSet, Namespace: "kube-system", Name: "agent"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("workloads %+v, want %+v", got, want)
	}
	if err == nil || !strings.Contains(err.Error(), `inventory entry 9 ("garbage")`) {
		t.Fatalf("error %v", err)
	}
	if got, err := WorkloadsFromInventory(nil); got != nil || err != nil {
		t.Fatalf("nil inventory: %v, %v", got, err)
	}
}
