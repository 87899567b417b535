package deploy

import (
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
// Suspended column where the kind can be suspended, as `flux get` does.
func TestDeployCRDsAsKubectlFindsThem(t *testing.T) {
	mustBeInstalled(t)
	ctx := hub(t, time.Minute)
	list, err := clientset.Discovery().ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"fleetrollouts": {"fro", "fr"},
		"fleetclusters": {"fc"},
		"gatereceipts":  {"grc", "gr"},
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
	body, err := clientset.Discovery().RESTClient().Get().AbsPath("/apis", v1alpha1.GroupVersion.Group, v1alpha1.GroupVersion.Version, "namespaces", ns.Name, "fleetclusters").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	col := slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == "Suspended" })
	if col < 0 || len(table.Rows) != 1 || table.Rows[0].Cells[col] != true {
		t.Errorf("kubectl get fleetclusters shows columns %v, rows %v: want a Suspended column saying true", table.ColumnDefinitions, table.Rows)
	}
}
