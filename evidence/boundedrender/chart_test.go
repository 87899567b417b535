package boundedrender

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/evidence/chart"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/worker"
)

// chartArchive packages the chart of files (paths relative to the chart's directory) as `helm
// package` does.
func chartArchive(t *testing.T, files map[string]string) []byte {
	t.Helper()
	c, err := localfleet.PackageChartFiles("the test's chart", files, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return c.Archive
}

func demoRelease() *helmv2.HelmRelease {
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "demo"}}
	hr.Spec.ReleaseName, hr.Spec.TargetNamespace = "demo", "apps"
	return hr
}

// A chart renders in a worker to what it renders to in-process: the same objects, CRDs and hooks,
// the values and the options carried over; a chart whose values its values.schema.json refuses
// comes back with Helm's error as it does in-process, a finding, not a failure of the worker.
func TestAWorkerRendersAChartAsInProcess(t *testing.T) {
	c, err := localfleet.PackageChart("../../testdata/charts/hooks", "", "")
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{"greeting": "hi", "replicas": float64(3)}
	opts := chart.Options{Upgrade: true, KubeVersion: "v1.37.2", SourceRevision: "sha256:" + strings.Repeat("ab", 32)}
	want, err := chart.Render(context.Background(), c.Archive, demoRelease(), values, opts)
	if err != nil {
		t.Fatal(err)
	}
	r := &Renderer{Budget: DefaultBudget}
	got, renderErr, err := r.RenderChart(context.Background(), "rendering the candidate", c.Archive, demoRelease(), values, opts)
	if err != nil || renderErr != nil {
		t.Fatalf("rendering in a worker: %v, %v", renderErr, err)
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) || len(got.Objects) == 0 || len(got.CRDs) != 2 || len(got.Hooks) != 1 {
		t.Errorf("worker render\n%s\nin-process\n%s", gj, wj)
	}

	strict := chartArchive(t, map[string]string{
		"Chart.yaml":            "apiVersion: v2\nname: strict\nversion: 1.0.0\n",
		"values.yaml":           "replicas: 1\n",
		"values.schema.json":    `{"type":"object","properties":{"replicas":{"type":"integer","maximum":5}}}`,
		"templates/config.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: strict\ndata:\n  replicas: {{ .Values.replicas | quote }}\n",
	})
	_, wantErr := chart.Render(context.Background(), strict, demoRelease(), map[string]any{"replicas": float64(9)}, chart.Options{})
	_, renderErr, err = r.RenderChart(context.Background(), "rendering the candidate", strict, demoRelease(), map[string]any{"replicas": float64(9)}, chart.Options{})
	if err != nil || renderErr == nil || wantErr == nil || renderErr.Error() != wantErr.Error() || !strings.Contains(renderErr.Error(), "replicas") {
		t.Errorf("values the schema refuses: %v (worker: %v), want %v", renderErr, err, wantErr)
	}
}

// A chart whose template builds a list of fifty million numbers passes the memory budget (or the
// time budget) of its worker: the caller gets a *worker.BudgetError naming the render budget.
func TestAChartOverBudgetEndsItsWorker(t *testing.T) {
	heavy := chartArchive(t, map[string]string{
		"Chart.yaml":            "apiVersion: v2\nname: heavy\nversion: 1.0.0\n",
		"templates/config.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: heavy\ndata:\n  n: {{ len (until 50000000) | quote }}\n",
	})
	r := &Renderer{Budget: worker.Budget{Time: 10 * time.Second, Memory: 128 << 20}}
	_, renderErr, err := r.RenderChart(context.Background(), "rendering the candidate", heavy, demoRelease(), nil, chart.Options{})
	var be *worker.BudgetError
	if !errors.As(err, &be) || renderErr != nil || !strings.HasPrefix(err.Error(), "rendering the candidate exceeded the render budget") {
		t.Errorf("a chart over the budget: %v (%v)", err, renderErr)
	}
}
