package generated

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

// The controller-gen arguments of the Makefile's targets, without their output rules. The test checks
// that the Makefile still runs exactly these, so a change there is not silently left out here.
var (
	// manifests: CRDs into config/crd/bases, RBAC into config/rbac.
	manifestsArgs = []string{"crd", "rbac:roleName=tidegate-controller", "paths=./api/...", "paths=./controllers/..."}
	crdDir        = filepath.Join("config", "crd", "bases")
	rbacDir       = filepath.Join("config", "rbac")
	// generate: deepcopy code next to the types of every package under api/.
	generateArgs = []string{"object:headerFile=hack/boilerplate.go.txt", "paths=./api/..."}
	apiDir       = "api"
)

const staleMessage = "generated files are stale: run `make generate manifests`"

// TestGeneratedFilesAreFresh regenerates the CRDs, the RBAC role and the deepcopy code into a temporary
// directory, with the Makefile's controller-gen and arguments, and compares them byte for byte with the
// files in the repository.
func TestGeneratedFilesAreFresh(t *testing.T) {
	root := testenv.RepoRoot()
	gen, err := controllerGen()
	if err != nil {
		t.Fatal(err)
	}
	checkMakefile(t, root)

	tmp := t.TempDir()
	var stale []string

	// CRDs and RBAC.
	tmpCRD, tmpRBAC := filepath.Join(tmp, "crd"), filepath.Join(tmp, "rbac")
	run(t, root, gen, append(append([]string{}, manifestsArgs...),
		"output:crd:artifacts:config="+tmpCRD, "output:rbac:artifacts:config="+tmpRBAC)...)
	crds := generatedFiles(t, tmpCRD)
	if len(crds) == 0 {
		t.Fatalf("controller-gen generated no CRDs into %s", tmpCRD)
	}
	stale = append(stale, compare(t, root, tmpCRD, crdDir, crds)...)
	// A CRD that is no longer generated (a type was removed or renamed) is stale too.
	for _, f := range committedFiles(t, filepath.Join(root, crdDir), ".yaml") {
		if !slices.Contains(crds, f) {
			stale = append(stale, filepath.Join(crdDir, f)+" (no longer generated: delete it)")
		}
	}
	rbac := generatedFiles(t, tmpRBAC)
	if len(rbac) == 0 {
		t.Fatalf("controller-gen generated no RBAC into %s", tmpRBAC)
	}
	stale = append(stale, compare(t, root, tmpRBAC, rbacDir, rbac)...)

	// Deepcopy code. controller-gen writes it next to each package's sources; output:object:dir puts every
	// package's file into one directory, so each package is generated on its own.
	pkgs := goPackages(t, filepath.Join(root, apiDir))
	if len(pkgs) == 0 {
		t.Fatalf("no Go packages under %s", filepath.Join(root, apiDir))
	}
	objArgs := withoutPaths(generateArgs)
	generatedAny := false
	for _, pkg := range pkgs {
		out := filepath.Join(tmp, "object", pkg)
		run(t, root, gen, append(append([]string{}, objArgs...), "paths=./"+filepath.ToSlash(pkg), "output:object:dir="+out)...)
		files := generatedFiles(t, out)
		generatedAny = generatedAny || len(files) > 0
		stale = append(stale, compare(t, root, out, pkg, files)...)
		for _, f := range committedFiles(t, filepath.Join(root, pkg), ".go") {
			if strings.HasPrefix(f, "zz_generated.") && !slices.Contains(files, f) {
				stale = append(stale, filepath.Join(pkg, f)+" (no longer generated: delete it)")
			}
		}
	}
	if !generatedAny {
		t.Fatalf("controller-gen generated no deepcopy code for %v", pkgs)
	}

	if len(stale) > 0 {
		t.Fatalf("%s\n\t%s", staleMessage, strings.Join(stale, "\n\t"))
	}
}

// controllerGen returns the controller-gen that `make testbin` built, in the testbin directory that
// testbin.Dir finds, as the Makefile's $(CONTROLLER_GEN) is.
func controllerGen() (string, error) {
	dir, err := testbin.Dir("")
	if err != nil {
		return "", err
	}
	gen := filepath.Join(dir, "bin", "controller-gen")
	if _, err := os.Stat(gen); err != nil {
		return "", fmt.Errorf("controller-gen is missing in %s: run `make testbin` first: %w", filepath.Dir(gen), err)
	}
	return gen, nil
}

// checkMakefile fails the test when the Makefile's generate and manifests targets no longer run
// controller-gen with the arguments this test uses.
func checkMakefile(t *testing.T, root string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	recipes := map[string]string{}
	target := ""
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		if m := regexp.MustCompile(`^([a-zA-Z0-9_-]+):`).FindStringSubmatch(line); m != nil {
			target = m[1]
			continue
		}
		if strings.HasPrefix(line, "\t") && target != "" {
			recipes[target] += " " + strings.Join(strings.Fields(line), " ")
		}
	}
	for target, want := range map[string][]string{
		"manifests": append(append([]string{"$(CONTROLLER_GEN)"}, manifestsArgs...),
			"output:crd:artifacts:config="+filepath.ToSlash(crdDir), "output:rbac:artifacts:config="+filepath.ToSlash(rbacDir)),
		"generate": append([]string{"$(CONTROLLER_GEN)"}, generateArgs...),
	} {
		if got, w := strings.TrimSpace(recipes[target]), strings.Join(want, " "); got != w {
			t.Fatalf("the Makefile's %s target runs\n\t%s\nbut this test regenerates with\n\t%s\nupdate %s to match the Makefile",
				target, got, w, "test/generated/generated_test.go")
		}
	}
}

// run runs controller-gen in the repository root.
func run(t *testing.T, root, gen string, args ...string) {
	t.Helper()
	cmd := exec.Command(gen, args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("controller-gen %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}

// compare compares the files generated into dir with their namesakes in the repository directory repoDir,
// and returns the repository paths of those that differ or are missing.
func compare(t *testing.T, root, dir, repoDir string, files []string) []string {
	t.Helper()
	var stale []string
	for _, f := range files {
		want, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		rel := filepath.Join(repoDir, f)
		got, err := os.ReadFile(filepath.Join(root, rel))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			stale = append(stale, rel+" (missing)")
		case err != nil:
			t.Fatal(err)
		case !bytes.Equal(got, want):
			stale = append(stale, fmt.Sprintf("%s (differs from line %d)", rel, firstDifferentLine(got, want)))
		}
	}
	return stale
}

func firstDifferentLine(a, b []byte) int {
	la, lb := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := 0; i < len(la) && i < len(lb); i++ {
		if !bytes.Equal(la[i], lb[i]) {
			return i + 1
		}
	}
	return min(len(la), len(lb)) + 1
}

// generatedFiles lists the files controller-gen wrote into dir (none when it did not create dir).
func generatedFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// committedFiles lists the files in dir, not below it, whose names end in ext.
func committedFiles(t *testing.T, dir, ext string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ext) {
			files = append(files, e.Name())
		}
	}
	return files
}

// goPackages lists, relative to the repository root, the directories under dir holding non-test Go files.
func goPackages(t *testing.T, dir string) []string {
	t.Helper()
	root := testenv.RepoRoot()
	seen := map[string]bool{}
	var pkgs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != dir && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".go") || strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		if !seen[rel] {
			seen[rel] = true
			pkgs = append(pkgs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pkgs)
	return pkgs
}

func withoutPaths(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "paths=") {
			out = append(out, a)
		}
	}
	return out
}
