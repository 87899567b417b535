package docs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

// hub is a client of a real kube-apiserver with tidegate's and Flux's CRDs, or hubErr says why
// it did not start.
var (
	hub    client.Client
	hubErr error
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithAPIServer(m, scheme.New(), testbin.TidegateCRDs|testbin.FluxCRDs, func(c client.Client, err error) {
		hub, hubErr = c, err
	}))
}

// yamlBlocks returns the ```yaml blocks of the repository file name, in order.
func yamlBlocks(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), name))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		if !ok {
			t.Fatalf("%s: a yaml block is not closed", name)
		}
		blocks = append(blocks, block)
	}
	return blocks
}

// The README's FleetRollout has only fields the API types know (a strict decode), and a real
// kube-apiserver with tidegate's CRDs accepts it: its OpenAPI schema and CEL rules (a server-side
// dry-run create).
func TestREADMEFleetRolloutIsValid(t *testing.T) {
	blocks := yamlBlocks(t, "README.md")
	if len(blocks) != 1 {
		t.Fatalf("README.md has %d yaml blocks, want the one FleetRollout", len(blocks))
	}
	fr := &v1alpha1.FleetRollout{}
	if err := yaml.UnmarshalStrict([]byte(blocks[0]), fr); err != nil {
		t.Fatalf("README.md's FleetRollout: %v", err)
	}
	if fr.Kind != "FleetRollout" || fr.APIVersion != v1alpha1.GroupVersion.String() {
		t.Fatalf("README.md's yaml block is a %s %s, want a FleetRollout of %s", fr.APIVersion, fr.Kind, v1alpha1.GroupVersion)
	}

	if hubErr != nil {
		t.Fatalf("no API server: %v", hubErr)
	}
	c := hub
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fr.Namespace}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, fr, client.DryRunAll); err != nil {
		t.Errorf("the API server refuses README.md's FleetRollout: %v", err)
	}
}
