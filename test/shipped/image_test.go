package shipped

import (
	"archive/tar"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/tidegate/tidegate/hack/lib/image"
	"github.com/tidegate/tidegate/test/testenv"
)

// The image `make image` builds (hack/image) holds the controller alone, statically linked, run as
// 65532 with no shell, labelled with the commit it was built from; image.txt names it by the
// digest the layout holds, and the binary read back out of the image runs.
func TestImage(t *testing.T) {
	out := filepath.Join(binDir, "dist")
	cmd := exec.Command("go", "run", "./hack/image", "-o", out)
	cmd.Dir = testenv.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./hack/image: %v\n%s", err, b)
	}
	ref, err := os.ReadFile(filepath.Join(out, "image.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tagged, digest, ok := strings.Cut(strings.TrimSpace(string(ref)), "@")
	if !ok || !strings.HasPrefix(tagged, image.Repository+":") || !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("image.txt says %q, want %s:<tag>@sha256:<digest>", ref, image.Repository)
	}

	idx, err := layout.ImageIndexFromPath(filepath.Join(out, "tidegate-controller-image"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Digest.String() != digest {
		t.Fatalf("the layout holds %+v, want the one image %s", m.Manifests, digest)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Config; len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/tidegate-controller" || c.User != "65532:65532" {
		t.Errorf("entrypoint %v, user %q: want [/tidegate-controller] as 65532:65532", c.Entrypoint, c.User)
	}
	head, err := exec.Command("git", "-C", testenv.RepoRoot(), "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Config.Labels; l[image.LabelRevision] != strings.TrimSpace(string(head)) || l[image.LabelVersion] == "" {
		t.Errorf("labels %v: want revision %s (HEAD) and a version", l, head)
	}
	files, err := image.Files(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files["tidegate-controller"] != 0o555 {
		t.Errorf("the image holds %v, want only tidegate-controller (no shell, no other file)", files)
	}

	// Read the binary back out of the image: statically linked (no ELF interpreter, so an empty
	// base runs it), and it runs.
	bin := filepath.Join(binDir, "from-image")
	f, err := os.Create(bin)
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	if err := extractOne(rc, "tidegate-controller", f); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	f.Close()
	e, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the controller in the image is dynamically linked: it cannot run on an empty base")
		}
	}
	e.Close()
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	if !strings.Contains(string(help), "--enable-leader-election") {
		t.Errorf("the controller from the image did not run: --help printed\n%s", help)
	}
}

// extractOne copies the file name out of the tar stream r into w.
func extractOne(r io.Reader, name string, w io.Writer) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			return fmt.Errorf("%s is not in the image: %w", name, err)
		}
		if h.Name == name {
			_, err := io.Copy(w, tr)
			return err
		}
	}
}
