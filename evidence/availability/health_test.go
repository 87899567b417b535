package availability

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/internal/localfleet"
)

// Objects of the kinds a Kustomization's healthCheckExprs judge are sampled beside the apps
// workloads, each kind by its own entry (the kind's, else its group's), read at the inventory's
// version; the apps kinds stay read by their replicas whatever the expressions say; two entries
// for one kind make every judged object's reads fail, as kustomize-controller refuses the list.
func TestWorkloadsFromInventoryJudgedByExpressions(t *testing.T) {
	inv := &kustomizev1.ResourceInventory{Entries: []kustomizev1.ResourceRef{
		{ID: "demo_web_apps_Deployment", Version: "v1"},
		{ID: "demo_web_cert-manager.io_Certificate", Version: "v1"},
		{ID: "demo_web_cert-manager.io_Issuer", Version: "v1"},
		{ID: "demo_db_postgresql.cnpg.io_Cluster", Version: "v1"},
		{ID: "demo_db_postgresql.cnpg.io_Backup", Version: "v1"},
		{ID: "_shared_example.com_Pool", Version: "v1beta2"},
		{ID: "demo_web__Service", Version: "v1"},
		{ID: "demo_web-7d9f_apps_ReplicaSet", Version: "v1"},
	}}
	certificate := kustomize.CustomHealthCheck{APIVersion: "cert-manager.io/v1", Kind: "Certificate",
		HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: "status.conditions.exists(e, e.type == 'Ready' && e.status == 'True')"}}
	cnpg := kustomize.CustomHealthCheck{APIVersion: "postgresql.cnpg.io/v1",
		HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: "status.phase == 'Cluster in healthy state'"}}
	backup := kustomize.CustomHealthCheck{APIVersion: "postgresql.cnpg.io/v1", Kind: "Backup",
		HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: "status.phase == 'completed'", Failed: "status.phase == 'failed'"}}
	pool := kustomize.CustomHealthCheck{APIVersion: "example.com/v1", Kind: "Pool",
		HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: "status.ready"}}
	apps := kustomize.CustomHealthCheck{APIVersion: "apps/v1", Kind: "Deployment",
		HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: "false"}}

	got, err := WorkloadsFromInventory(inv, certificate, cnpg, backup, pool, apps)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range got {
		judgedBy := ""
		if w.Health != nil {
			judgedBy = w.Health.Current
		}
		ids = append(ids, w.String()+" "+w.APIVersion+" "+judgedBy)
	}
	want := []string{
		"Pool shared example.com/v1beta2 status.ready",
		"Backup demo/db postgresql.cnpg.io/v1 status.phase == 'completed'",
		"Cluster demo/db postgresql.cnpg.io/v1 status.phase == 'Cluster in healthy state'",
		"Certificate demo/web cert-manager.io/v1 status.conditions.exists(e, e.type == 'Ready' && e.status == 'True')",
		"Deployment demo/web  ",
	}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("workloads\n got %q\nwant %q", ids, want)
	}
	if without, _ := WorkloadsFromInventory(inv); len(without) != 1 || without[0].Kind != KindDeployment {
		t.Fatalf("without expressions: %v", without)
	}

	sampled := Sampled(certificate, cnpg)
	for gk, want := range map[schema.GroupKind]bool{
		{Group: "apps", Kind: "DaemonSet"}:                true,
		{Group: "cert-manager.io", Kind: "Certificate"}:   true,
		{Group: "cert-manager.io", Kind: "Issuer"}:        false,
		{Group: "postgresql.cnpg.io", Kind: "ScheduledX"}: true,
		{Group: "", Kind: "Service"}:                      false,
	} {
		if sampled(gk) != want {
			t.Errorf("Sampled(%s) = %v, want %v", gk, !want, want)
		}
	}

	dup := certificate
	dup.APIVersion = "cert-manager.io/v1beta1"
	got, err = WorkloadsFromInventory(inv, certificate, pool, dup)
	if err != nil || len(got) != 3 {
		t.Fatalf("with a duplicate: %v, %v", got, err)
	}
	for _, w := range got {
		if w.Health != nil && !strings.Contains(w.Health.Invalid, "healthCheckExprs[0] and healthCheckExprs[2] are both for Certificate.cert-manager.io") {
			t.Errorf("%s: invalid %q", w, w.Health.Invalid)
		}
	}
}

// Health check expressions on a real member API server: a custom resource whose status its
// expressions call Current is available; Failed, InProgress (an expression, or a status that has not
// observed the latest generation) are unavailable; an expression that cannot be evaluated on the
// object, or does not parse, is a failed read, never available. The summary and its limits name
// the kind that was judged so.
func testJudgedByExpressions(t *testing.T, m *localfleet.Member) {
	ctx := context.Background()
	widgets := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec":   {Type: "object", XPreserveUnknownFields: ptr(true)},
						"status": {Type: "object", XPreserveUnknownFields: ptr(true)},
					},
				}},
			}},
		},
	}
	create(t, m.Client, widgets)
	waitEstablished(t, m.Client, widgets.Name)

	ns := namespace(t, m.Client)
	ready := map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}
	widget := func(name string, status map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec":     map[string]any{"size": int64(1)},
		}}
		create(t, m.Client, u)
		if status != nil {
			u.Object["status"] = status
			if err := m.Client.Status().Update(ctx, u); err != nil {
				t.Fatalf("setting the status of widget %s: %v", name, err)
			}
		}
		return u
	}
	widget("ready", ready)
	widget("failed", map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "OutOfStock"}}})
	widget("progressing", map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "Unknown"}}})
	widget("unjudgeable", nil) // no status: the expressions' status.conditions does not exist
	stale := widget("stale", nil)
	stale.Object["spec"] = map[string]any{"size": int64(2)} // generation 2
	if err := m.Client.Update(ctx, stale); err != nil {
		t.Fatal(err)
	}
	stale.Object["status"] = map[string]any{"observedGeneration": int64(1), "conditions": ready["conditions"]}
	if err := m.Client.Status().Update(ctx, stale); err != nil {
		t.Fatal(err)
	}

	check := kustomize.CustomHealthCheck{APIVersion: "example.com/v1", Kind: "Widget", HealthCheckExpressions: kustomize.HealthCheckExpressions{
		InProgress: "status.conditions.exists(e, e.type == 'Ready' && e.status == 'Unknown')",
		Failed:     "status.conditions.exists(e, e.type == 'Ready' && e.status == 'False')",
		Current:    "status.conditions.exists(e, e.type == 'Ready' && e.status == 'True')",
	}}
	judged := func(name string, checks ...kustomize.CustomHealthCheck) []Workload {
		t.Helper()
		ws, err := WorkloadsFromInventory(&kustomizev1.ResourceInventory{Entries: []kustomizev1.ResourceRef{
			{ID: ns + "_" + name + "_example.com_Widget", Version: "v1"},
		}}, checks...)
		if err != nil || len(ws) != 1 || ws[0].Health == nil {
			t.Fatalf("workloads of widget %s: %v, %v", name, ws, err)
		}
		return ws
	}
	s := New(Options{Interval: every})
	sample := func(cluster string, ws []Workload) ClusterSummary {
		t.Helper()
		start := time.Now()
		for range 3 {
			// A failed read is returned, for the caller to log; the sample is recorded all the same.
			_ = s.Observe(ctx, cluster, m.Client, ws, time.Now())
			time.Sleep(every)
		}
		got := s.Summary(cluster, start, time.Now())
		logSummary(t, got)
		if got.Samples != 3 || !reflect.DeepEqual(got.JudgedKinds, []string{"Widget.example.com"}) {
			t.Fatalf("%s: summary %+v", cluster, got)
		}
		return got
	}

	if got := sample("ready", judged("ready", check)); got.MinAvailableRatio != 1 || got.UnavailableSeconds != 0 || got.Observed != 3 || got.ReadErrors != 0 {
		t.Errorf("a Current widget: %+v", got)
	}
	for _, name := range []string{"failed", "progressing", "stale"} {
		ws := judged(name, check)
		got := sample(name, ws)
		if got.MinAvailableRatio != 0 || got.UnavailableSeconds <= 0 || got.Observed != 3 || got.ReadErrors != 0 ||
			got.Worst == nil || got.Worst.Workload != ws[0] || got.Worst.Available != 0 || got.Worst.Desired != 1 {
			t.Errorf("a widget that is not Current (%s): %+v (worst %+v)", name, got, got.Worst)
		}
	}
	for _, tc := range []struct {
		name, cluster string
		check         kustomize.CustomHealthCheck
		err           string
	}{
		{"unjudgeable", "unjudgeable", check, "no such attribute(s): status.conditions"},
		{"ready", "unparsable", kustomize.CustomHealthCheck{APIVersion: "example.com/v1", Kind: "Widget",
			HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: "status.conditions.exists(e, "}}, "failed to parse the expression Current"},
	} {
		got := sample(tc.cluster, judged(tc.name, tc.check))
		if got.Measured() || got.ReadErrors != 3 || got.FailedSamples != 3 || got.UnavailableSeconds != 0 || got.Worst != nil ||
			len(got.Errors) != 1 || !strings.Contains(got.Errors[0], "judging Widget "+ns+"/"+tc.name+" on cluster "+tc.cluster) || !strings.Contains(got.Errors[0], tc.err) {
			t.Errorf("expressions that cannot be evaluated (%s) are a failed read: %+v", tc.cluster, got)
		}
	}

	// A widget that fails during the soak: available, then not.
	ws := judged("ready", check)
	start := time.Now()
	sample("turns", ws)
	turned := time.Now()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ready"}, u); err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "False"}}}
	if err := m.Client.Status().Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	sample("turns", ws)
	if before := s.Summary("turns", start, turned); before.MinAvailableRatio != 1 || before.UnavailableSeconds != 0 {
		t.Errorf("before it failed: %+v", before)
	}
	whole := s.Summary("turns", start, time.Now())
	if whole.MinAvailableRatio != 0 || whole.UnavailableSeconds <= 0 {
		t.Errorf("over the soak: %+v", whole)
	}
	limit := "objects of Widget.example.com judged by the Kustomization's healthCheckExprs on turns: each is available (ratio 1) when its expressions say Current and unavailable (ratio 0) when they say InProgress or Failed"
	if l := Limits(whole); !strings.Contains(strings.Join(l, "\n"), limit) {
		t.Errorf("limits %q, want a line starting %q", l, limit)
	}
}

func ptr[T any](v T) *T { return &v }

// waitEstablished waits until the CRD of name is served.
func waitEstablished(t *testing.T, c client.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &crd); err == nil {
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s not established after %s", name, waitLimit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The kinds judged by expressions are kept per cluster and named once for a wave, with the
// clusters they were judged on; a sample of apps workloads only names none.
func TestLimitsNameTheKindsJudgedByExpressions(t *testing.T) {
	s := New(Options{Interval: 5 * time.Second})
	hc := &HealthCheck{HealthCheckExpressions: kustomize.HealthCheckExpressions{Current: "true"}}
	cert := Workload{Kind: "Certificate", Namespace: "demo", Name: "web", APIVersion: "cert-manager.io/v1", Health: hc}
	pool := Workload{Kind: "Pool", Name: "shared", APIVersion: "v1", Health: hc}
	for name, ws := range map[string][]Workload{"a": {web, cert}, "b": {pool, cert}, "c": {web}} {
		rs := make([]reading, len(ws))
		for i := range rs {
			rs[i] = ok(1)
		}
		if err := s.record(name, at(0), ws, rs); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := s.Summary("a", time.Time{}, time.Time{}), s.Summary("b", time.Time{}, time.Time{}), s.Summary("c", time.Time{}, time.Time{})
	if !reflect.DeepEqual(a.JudgedKinds, []string{"Certificate.cert-manager.io"}) || !reflect.DeepEqual(b.JudgedKinds, []string{"Certificate.cert-manager.io", "Pool"}) || c.JudgedKinds != nil {
		t.Fatalf("judged kinds %q, %q, %q", a.JudgedKinds, b.JudgedKinds, c.JudgedKinds)
	}
	want := "objects of Certificate.cert-manager.io, Pool judged by the Kustomization's healthCheckExprs on a, b: "
	var found bool
	for _, l := range Limits(a, b, c) {
		found = found || strings.HasPrefix(l, want)
	}
	if !found {
		t.Errorf("limits %q, want a line starting %q", Limits(a, b, c), want)
	}
	if l := Limits(c); len(l) != 1 {
		t.Errorf("apps workloads only: limits %q", l)
	}
}
