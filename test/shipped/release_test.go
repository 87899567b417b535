package shipped

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/hack/lib/image"
	"github.com/tidegate/tidegate/hack/lib/release"
	"github.com/tidegate/tidegate/test/testenv"
)

// A release carries the CLI for Linux and macOS on amd64 and arm64, the four pairs people type
// commands on, named tidegate-<os>-<arch>.
func TestReleaseCLIPlatforms(t *testing.T) {
	want := []string{"darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"}
	got := slices.Sorted(slices.Values(release.CLIPlatforms))
	if !slices.Equal(got, want) {
		t.Errorf("release.CLIPlatforms is %v, want %v", got, want)
	}
	if n := release.CLIName("darwin/arm64"); n != "tidegate-darwin-arm64" {
		t.Errorf("CLIName(darwin/arm64) = %q, want tidegate-darwin-arm64", n)
	}
}

// `make release` (hack/release) writes SHA256SUMS over every file it writes, the CLI binaries
// among them, each sum that file's, and the CLI it wrote runs. The release is built for this
// machine's platform alone: a cross-compile of the CLI's dependencies for each of the other three
// takes minutes on two cores, and the code that builds one platform builds them all (the list is
// TestReleaseCLIPlatforms's).
func TestReleaseWritesTheCLIWithSums(t *testing.T) {
	out := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	ref := image.Repository + ":v9.9.9@sha256:" + strings.Repeat("ab", 32)
	cmd := exec.Command("go", "run", "./hack/release", "-o", out, "-image", ref, "-cli", platform)
	cmd.Dir = testenv.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./hack/release: %v\n%s", err, b)
	}

	sums := readSums(t, filepath.Join(out, release.Sums))
	var want []string
	for _, f := range release.Files {
		want = append(want, f.Name)
	}
	want = append(want, release.CLIName(platform))
	if got := slices.Sorted(func(yield func(string) bool) {
		for name := range sums {
			if !yield(name) {
				return
			}
		}
	}); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("%s lists %v, want %v", release.Sums, got, want)
	}
	for name, sum := range sums {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Errorf("%s lists %s: %v", release.Sums, name, err)
			continue
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != sum {
			t.Errorf("%s: %s says %s, the file's is %s", name, release.Sums, sum, got)
		}
	}

	// With no hub to ask, version prints the client's line and exits 2.
	v, _ := exec.Command(filepath.Join(out, release.CLIName(platform)), "version", "--kubeconfig", filepath.Join(out, "none")).CombinedOutput()
	if !strings.Contains(string(v), "client: tidegate ") {
		t.Errorf("the released CLI did not run: tidegate version printed\n%s", v)
	}
}

// readSums reads a sha256sum file: a sum and a name on each line, two spaces apart.
func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		sum, name, ok := strings.Cut(s.Text(), "  ")
		if !ok || len(sum) != 64 || name == "" {
			t.Fatalf("%s: line %q is not <sha256>  <name>", path, s.Text())
		}
		sums[name] = sum
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return sums
}
