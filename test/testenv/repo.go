package testenv

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const module = "github.com/tidegate/tidegate"

// RepoRoot returns the root of the tidegate checkout the tests run in. `go test` runs a package's
// tests in the package's directory, so the root is the nearest directory above it whose go.mod
// declares tidegate's module; unlike the source path runtime.Caller records, this holds under
// -trimpath too. It panics outside a checkout: every caller would fail anyway.
func RepoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("finding the tidegate checkout: %v", err))
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if declaresModule(filepath.Join(dir, "go.mod")) {
			return dir
		}
		if filepath.Dir(dir) == dir {
			panic(fmt.Sprintf("no go.mod of module %s in %s or above: run the tests inside a tidegate checkout", module, wd))
		}
	}
}

func declaresModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == module
		}
	}
	return false
}
