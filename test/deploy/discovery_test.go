package deploy

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fluxcd/pkg/apis/meta"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// What kubectl finds through discovery once the CRDs are installed: `kubectl get tidegate` lists
// the three kinds (their category), each answers to short names, and `kubectl get` shows a
// Suspended column where the kind can be suspended and revisions cut to 8 characters, as `flux get`
// does.
func TestDeployCRDsAsKubectlFindsThem(t *testing.T) {
	mustBeInstalled(t)
	ctx := hub(t, time.Minute)
	list, err := clientset.Discovery().ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"fleetrollouts":  {"fro", "fr"},
		"fleetclusters":  {"fc"},
		"gatereceipts":   {"grc", "gr"},
		"rolloutledgers": {"rl"},
	}
	for _, r := range list.APIResources {
		short, ok := want[r.Name]
		if !ok {
			continue
		}
		delete(want, r.Name)
		if !slices.Contains(r.Categories, "tidegate") {
			t.Errorf("%s: categories %v, want tidegate (kubectl get tidegate)", r.Name, r.Categories)
		}
		if !slices.Equal(r.ShortNames, short) {
			t.Errorf("%s: short names %v, want %v", r.Name, r.ShortNames, short)
		}
	}
	if len(want) > 0 {
		t.Errorf("discovery lists none of %v", want)
	}

	// The table kubectl get prints, for a suspended FleetCluster.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "columns-"}}
	if err := admin.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	fc := &v1alpha1.FleetCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "member-1", Namespace: ns.Name},
		Spec: v1alpha1.FleetClusterSpec{
			Suspend:    true,
			KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "member-1-kubeconfig"}},
		},
	}
	if err := admin.Create(ctx, fc); err != nil {
		t.Fatal(err)
	}
	table := kubectlTable(t, ns.Name, "fleetclusters")
	if cell(table, "Suspended") != true {
		t.Errorf("kubectl get fleetclusters shows columns %v, rows %v: want a Suspended column saying true", table.ColumnDefinitions, table.Rows)
	}

	// A rollout's revisions as flux get prints them, the whole ones with -o wide; its status as the
	// controller writes it (status.short, TestStatusOfAPassLandsWholeOrNotAtAll).
	cand, kg := "main@sha1:0123456789abcdef0123456789abcdef01234567", "main@sha1:fedcba9876543210fedcba9876543210fedcba98"
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns.Name},
		Spec:       v1alpha1.FleetRolloutSpec{SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"}, Path: "./app"},
	}
	if err := admin.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}
	fr.Status = v1alpha1.FleetRolloutStatus{
		Phase:         v1alpha1.PhaseProgressing,
		Candidate:     &v1alpha1.RevisionStatus{Revision: cand},
		LastKnownGood: &v1alpha1.RevisionStatus{Revision: kg},
		Short:         &v1alpha1.ShortRevisions{Candidate: v1alpha1.FluxShortRevision(cand), KnownGood: v1alpha1.FluxShortRevision(kg)},
	}
	if err := admin.Status().Update(ctx, fr); err != nil {
		t.Fatal(err)
	}
	table = kubectlTable(t, ns.Name, "fleetrollouts")
	for column, want := range map[string]any{
		"Candidate": "main@sha1:01234567", "Known-Good": "main@sha1:fedcba98",
		"Candidate-Revision": cand, "Known-Good-Revision": kg,
	} {
		if got := cell(table, column); got != want {
			t.Errorf("kubectl get fleetrollouts: column %s is %v, want %v (columns %v)", column, got, want, table.ColumnDefinitions)
		}
	}
	for _, c := range table.ColumnDefinitions {
		if wide := c.Priority > 0; wide != (c.Name == "Candidate-Revision" || c.Name == "Known-Good-Revision" || c.Name == "Status") {
			t.Errorf("kubectl get fleetrollouts: column %s has priority %d", c.Name, c.Priority)
		}
	}
}

// kubectlTable is the table kubectl get prints of the tidegate objects of resource in namespace.
func kubectlTable(t *testing.T, namespace, resource string) metav1.Table {
	t.Helper()
	body, err := clientset.Discovery().RESTClient().Get().AbsPath("/apis", v1alpha1.GroupVersion.Group, v1alpha1.GroupVersion.Version, "namespaces", namespace, resource).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	return table
}

// cell is the named column of a table's only row, nil when there is no such column or not one row.
func cell(table metav1.Table, column string) any {
	col := slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == column })
	if col < 0 || len(table.Rows) != 1 || col >= len(table.Rows[0].Cells) {
		return nil
	}
	return table.Rows[0].Cells[col]
}
