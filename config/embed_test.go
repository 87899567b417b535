package config

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Every CRD file controller-gen wrote is embedded, once, and together they serve every kind of the
// API group: a file left out of the embed pattern, or a kind without its CRD, fails here.
func TestCRDsAreEveryGeneratedFile(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("crd", "bases", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != len(files) {
		t.Errorf("%d CRDs embedded from %d files in crd/bases", len(crds), len(files))
	}
	var kinds []string
	for _, crd := range crds {
		if crd.Spec.Group != v1alpha1.GroupVersion.Group {
			t.Errorf("CRD %s is of group %s, want %s", crd.Name, crd.Spec.Group, v1alpha1.GroupVersion.Group)
		}
		kinds = append(kinds, crd.Spec.Names.Kind)
	}
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	var want []string
	api := reflect.TypeFor[v1alpha1.FleetCluster]().PkgPath()
	for kind, typ := range s.KnownTypes(v1alpha1.GroupVersion) {
		// The scheme also registers metav1's options types in the group; lists have no CRD of their own.
		if typ.PkgPath() == api && !strings.HasSuffix(kind, "List") {
			want = append(want, kind)
		}
	}
	slices.Sort(kinds)
	slices.Sort(want)
	if !slices.Equal(kinds, want) {
		t.Errorf("embedded CRDs serve the kinds %v, the API has %v", kinds, want)
	}
}

func TestDecodeRefusesWhatIsNotACRD(t *testing.T) {
	_, err := decodeCRDs(strings.NewReader("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"))
	if err == nil || !strings.Contains(err.Error(), "ConfigMap x is not a CustomResourceDefinition") {
		t.Errorf("decoding a ConfigMap: %v", err)
	}
}
