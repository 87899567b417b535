package image

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildHello builds testdata/hello with env (GOOS, CGO_ENABLED, ...) added, as hack/image builds
// the controller, and returns the binary's path.
func buildHello(t *testing.T, env ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hello")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=true", "-ldflags=-s -w -buildid=", "-o", bin, "./testdata/hello")
	cmd.Env = append(append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/hello: %v\n%s", err, out)
	}
	return bin
}

func gitHead(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// The image is one layer holding the binary and nothing else, on an OCI manifest, run as 65532
// with the binary as entrypoint, labelled with its version and the commit it was built from.
func TestBuildIsTheBinaryAloneRunAsNonRoot(t *testing.T) {
	b, err := Build(buildHello(t), "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Tag.String(); got != Repository+":v1.2.3" {
		t.Errorf("tag %s, want %s:v1.2.3", got, Repository)
	}
	if !strings.HasSuffix(b.Ref(), "@"+b.Digest.String()) || !strings.HasPrefix(b.Digest.String(), "sha256:") {
		t.Errorf("ref %s does not end with the digest %s", b.Ref(), b.Digest)
	}
	if mt, _ := b.Image.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", mt, types.OCIManifestSchema1)
	}
	cfg, err := b.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Config; len(c.Entrypoint) != 1 || c.Entrypoint[0] != Entrypoint || len(c.Cmd) != 0 || c.User != "65532:65532" || len(c.Env) != 0 {
		t.Errorf("config %+v: want entrypoint [%s], no cmd, user 65532:65532, no env", c, Entrypoint)
	}
	if cfg.OS != "linux" || cfg.Architecture == "" {
		t.Errorf("platform %s/%s, want linux/<arch>", cfg.OS, cfg.Architecture)
	}
	labels := cfg.Config.Labels
	if labels[LabelVersion] != "v1.2.3" || labels[LabelRevision] != gitHead(t) || labels[LabelSource] != Source || labels[LabelCreated] == "" {
		t.Errorf("labels %v: want version v1.2.3, revision %s (HEAD), source %s, a creation time", labels, gitHead(t), Source)
	}
	if b.Revision != gitHead(t) {
		t.Errorf("revision %s, want HEAD %s", b.Revision, gitHead(t))
	}
	files, err := Files(b.Image)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files["tidegate-controller"] != 0o555 {
		t.Errorf("the image holds %v, want only tidegate-controller, mode 0555 (no shell, no other file)", files)
	}
	if layers, _ := b.Image.Layers(); len(layers) != 1 {
		t.Errorf("%d layers, want 1", len(layers))
	}
}

// The same binary makes the same image, digest for digest; the layout and the tarball hold that
// image.
func TestBuildIsReproducibleAndWritesWhatItBuilt(t *testing.T) {
	bin := buildHello(t)
	a, err := Build(bin, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(buildHello(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest {
		t.Errorf("two builds of one commit made %s and %s", a.Digest, b.Digest)
	}
	if strings.ContainsAny(a.Tag.TagStr(), "+/") || a.Version == "" {
		t.Errorf("version %q made tag %q", a.Version, a.Tag.TagStr())
	}

	dir := filepath.Join(t.TempDir(), "layout")
	if err := a.WriteLayout(dir); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != a.Digest || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != a.Tag.String() {
		t.Errorf("the layout's index is %+v, want the one image %s named %s", m.Manifests, a.Digest, a.Tag)
	}

	tb := filepath.Join(t.TempDir(), "image.tar")
	if err := a.WriteTarball(tb); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(tb, &a.Tag)
	if err != nil {
		t.Fatal(err)
	}
	// A docker tarball keeps the config and the layers, not the manifest: compare what it keeps.
	want, _ := a.Image.ConfigName()
	if got, err := img.ConfigName(); err != nil || got != want {
		t.Errorf("the tarball's image has config %s (%v), want %s", got, err, want)
	}
}

// A binary the empty base cannot run, or one that cannot say what it was built from, is refused
// with what to do.
func TestBuildRefusesWhatTheImageCannotRun(t *testing.T) {
	for name, tc := range map[string]struct {
		env  []string
		want string
	}{
		"darwin": {[]string{"GOOS=darwin"}, "build with GOOS=linux"},
		"cgo":    {[]string{"CGO_ENABLED=1"}, "build with CGO_ENABLED=0"},
		"novcs":  {[]string{"GOFLAGS=-buildvcs=false"}, "-buildvcs=true"},
	} {
		t.Run(name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "hello")
			args := []string{"build", "-o", bin}
			if name != "novcs" {
				args = append(args, "-buildvcs=true")
			}
			cmd := exec.Command("go", append(args, "./testdata/hello")...)
			cmd.Env = append(append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0"), tc.env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build: %v\n%s", err, out)
			}
			_, err := Build(bin, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if _, err := Build(filepath.Join(t.TempDir(), "nope"), ""); err == nil {
		t.Error("Build of a missing file succeeded")
	}
}
