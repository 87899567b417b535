package localfleet

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"
)

// A chart directory packages as `helm package` lays a chart out, under the chart's name, with the
// version and appVersion given in place of Chart.yaml's; it pushes as `helm push` does, tagged
// with its version, of Helm's media types, its config the chart's metadata and its layer the very
// archive (what source-controller copies out for an OCIRepository that selects it). The same chart
// packages and pushes to the same digest, and signs as any artifact does.
func TestPackageAndPushChart(t *testing.T) {
	c, err := PackageChart("../../testdata/charts/demo", "0.2.0+build.1", "2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "demo" || c.Version != "0.2.0+build.1" {
		t.Fatalf("chart %s %s, want demo 0.2.0+build.1", c.Name, c.Version)
	}
	files := untarred(t, compressed(c.Archive))
	for _, f := range []string{"demo/Chart.yaml", "demo/values.yaml", "demo/templates/deployment.yaml", "demo/templates/_helpers.tpl"} {
		if files[f] == "" {
			t.Errorf("the archive has no %s: %v", f, keys(files))
		}
	}
	var meta map[string]any
	if err := yaml.Unmarshal([]byte(files["demo/Chart.yaml"]), &meta); err != nil || meta["version"] != "0.2.0+build.1" || meta["appVersion"] != "2.0.0" || meta["name"] != "demo" {
		t.Errorf("Chart.yaml in the archive: %v, %v", meta, err)
	}
	again, err := PackageChart("../../testdata/charts/demo", "0.2.0+build.1", "2.0.0")
	if err != nil || !bytes.Equal(again.Archive, c.Archive) {
		t.Fatalf("the same chart packaged again differs: %v", err)
	}
	if as, err := PackageChart("../../testdata/charts/demo", "", ""); err != nil || as.Version != "0.1.0" {
		t.Fatalf("the chart as its Chart.yaml has it: %v, version %v", err, as)
	}

	reg, err := StartRegistry()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	a, err := PushChart(reg.Host+"/charts", c)
	if err != nil {
		t.Fatal(err)
	}
	if a.Tag != "0.2.0_build.1" || a.Repository.RepositoryStr() != "charts/demo" {
		t.Fatalf("pushed to %s:%s, want charts/demo:0.2.0_build.1", a.Repository, a.Tag)
	}
	if b, err := PushChart(reg.Host+"/charts", again); err != nil || b.Digest != a.Digest {
		t.Fatalf("the same chart pushed again: %v, digest %s, want %s", err, b.Digest, a.Digest)
	}
	img, layer := pulled(t, reg.Host+"/charts/demo:0.2.0_build.1", HelmConfigMediaType, HelmChartMediaType)
	config, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(config, &got); err != nil || got["name"] != "demo" || got["version"] != "0.2.0+build.1" {
		t.Errorf("config %s: %v", config, err)
	}
	rc, err := layer.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	pulled, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(pulled, c.Archive) {
		t.Error("the chart's layer is not its archive")
	}
	key, err := NewCosignKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := Sign(a, key); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Image(a.Repository.Tag("sha256-"+a.Digest.Hex+".sig"), remote.WithContext(t.Context())); err != nil {
		t.Errorf("no signature where cosign looks for it: %v", err)
	}

	if _, err := PackageChart(t.TempDir(), "1.0.0", ""); err == nil {
		t.Error("a directory without a Chart.yaml packaged")
	}
}

type compressed []byte

func (c compressed) Compressed() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(c)), nil }

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
