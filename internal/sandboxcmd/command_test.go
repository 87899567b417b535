package sandboxcmd

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/tidegate/tidegate/internal/testbin"
)

// recorder are Actions that keep what they were asked.
type recorder struct {
	up  *UpOptions
	run *RunOptions
	dir string
}

func (r *recorder) Up(_ *cobra.Command, o UpOptions) error   { r.up = &o; return nil }
func (r *recorder) Run(_ *cobra.Command, o RunOptions) error { r.run = &o; return nil }
func (r *recorder) Status(_ *cobra.Command, d string) error  { r.dir = d; return nil }
func (r *recorder) Down(_ *cobra.Command, d string) error    { r.dir = d; return nil }

// execute runs args on the sandbox command under a root command named root (none when empty: the
// sandbox command is the root, as in tidegate-sandbox) and returns the error and the output.
func execute(root string, a Actions, args ...string) (string, error) {
	cmd := NewCommand(a)
	if root != "" {
		r := &cobra.Command{Use: root}
		r.AddCommand(cmd)
		cmd = r
	} else {
		cmd.Use = Binary
	}
	var out bytes.Buffer
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.Execute()
	return out.String(), err
}

// The command tree: usage errors exit 2 before any action; run is hidden, and up re-executes it by
// its path from the root, whether the sandbox command is under tidegate or is tidegate-sandbox's
// root.
func TestCommandTree(t *testing.T) {
	for _, args := range [][]string{
		{"sandbox", "up", "--clusters", "0"},
		{"sandbox", "up", "--clusters", "11"},
		{"sandbox", "up", "--dir", ""},
	} {
		r := &recorder{}
		out, err := execute("tidegate", r, args...)
		var e *Error
		if !errors.As(err, &e) || e.Code != 2 || r.up != nil {
			t.Errorf("%v: %v (up asked: %v), want exit 2 and no action:\n%s", args, err, r.up != nil, out)
		}
	}
	for root, want := range map[string][]string{"flux-fleet": {"sandbox", "run"}, "": {"run"}} {
		r := &recorder{}
		args := []string{"up", "--demo"}
		if root != "" {
			args = append([]string{"sandbox"}, args...)
		}
		if out, err := execute(root, r, args...); err != nil || r.up == nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if !slices.Equal(r.up.RunArgs, want) || !r.up.Demo || r.up.Clusters != defaultClusters || r.up.Dir != DefaultDir() {
			t.Errorf("under %q: up asked %+v, want RunArgs %v, --demo and the defaults", root, *r.up, want)
		}
	}
	help, err := execute("tidegate", &recorder{}, "sandbox", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"up", "status", "down"} {
		if !strings.Contains(help, "  "+sub+" ") {
			t.Errorf("sandbox --help should list %s:\n%s", sub, help)
		}
	}
	if strings.Contains(help, "  run ") {
		t.Errorf("sandbox --help should not list the hidden run:\n%s", help)
	}
	if !strings.Contains(help, "$"+testbin.DirEnv) {
		t.Errorf("the help names $%s, testbin's own variable: %s", testbinDirEnv, testbin.DirEnv)
	}
}

// What the CLI hands tidegate-sandbox (Exec) asks it exactly what the CLI was asked, and up hands
// run the package's delivery it was asked: --oci, or --helm.
func TestArgsAskTheSame(t *testing.T) {
	for _, delivery := range [][2]bool{{false, false}, {true, false}, {false, true}} {
		oci, helm := delivery[0], delivery[1]
		up := UpOptions{Clusters: 5, Demo: true, OCI: oci, Helm: helm, Dir: "/tmp/sb", Testbin: "/tb"}
		r := &recorder{}
		if out, err := execute("", r, up.Args()...); err != nil || r.up == nil {
			t.Fatalf("%v: %v\n%s", up.Args(), err, out)
		}
		up.RunArgs = []string{"run"}
		if !slices.Equal(r.up.RunArgs, up.RunArgs) || r.up.Clusters != up.Clusters || r.up.Demo != up.Demo || r.up.OCI != up.OCI ||
			r.up.Helm != up.Helm || r.up.Dir != up.Dir || r.up.Testbin != up.Testbin {
			t.Errorf("up %v was asked %+v, want %+v", up.Args(), *r.up, up)
		}
		run := RunOptions{Clusters: 2, OCI: oci, Helm: helm, Dir: "/tmp/sb", Testbin: "/tb"}
		if out, err := execute("", r, append([]string{"run"}, run.Args()...)...); err != nil || r.run == nil || *r.run != run {
			t.Errorf("run %v: %v, asked %+v, want %+v\n%s", run.Args(), err, r.run, run, out)
		}
	}
}

// --oci and --helm together are refused, by up and by run, before any action, with a message
// that says why and what to do.
func TestOCIAndHelmAreExclusive(t *testing.T) {
	for _, args := range [][]string{
		{"sandbox", "up", "--demo", "--oci", "--helm"},
		{"sandbox", "run", "--helm", "--oci"},
	} {
		r := &recorder{}
		out, err := execute("tidegate", r, args...)
		var e *Error
		if !errors.As(err, &e) || e.Code != 2 || r.up != nil || r.run != nil ||
			!strings.Contains(err.Error(), "--oci and --helm cannot be used together") || !strings.Contains(err.Error(), "choose one") {
			t.Errorf("%v: %v (up asked: %v, run asked: %v), want exit 2, no action and why:\n%s", args, err, r.up != nil, r.run != nil, out)
		}
	}
	r := &recorder{}
	if out, err := execute("tidegate", r, "sandbox", "up", "--helm"); err != nil || r.up == nil || !r.up.Helm || r.up.OCI {
		t.Errorf("up --helm: %v, asked %+v\n%s", err, r.up, out)
	}
}

// Without tidegate-sandbox beside the binary or on PATH, the error says how to build it.
func TestFindNamesHowToBuild(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Find()
	if err == nil || !strings.Contains(err.Error(), "make build") || !strings.Contains(err.Error(), "go install ./cmd/tidegate-sandbox") {
		t.Errorf("Find with no tidegate-sandbox: %v, want the ways to build it", err)
	}
}
