package sandboxcmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// Error ends a sandbox command with an exit code: 1 when the answer is no (the sandbox failed to
// start, the demo failed, no sandbox runs), 2 when the question could not be asked (usage). The root
// command reads the code through ExitCode. Reported is true when the command already printed what
// went wrong, in detail, on its output.
type Error struct {
	Code     int
	Err      error
	Reported bool
}

func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode is the process's exit code for this error.
func (e *Error) ExitCode() int { return e.Code }

// Failed is an Error with exit code 1: the answer is no.
func Failed(format string, args ...any) error {
	return &Error{Code: 1, Err: fmt.Errorf(format, args...)}
}

func usage(format string, args ...any) error {
	return &Error{Code: 2, Err: fmt.Errorf(format, args...)}
}

// The clusters a sandbox may have: each is an API server and an etcd on this machine.
const (
	defaultClusters = 3
	maxClusters     = 10
)

// UpOptions are what `sandbox up` was asked.
type UpOptions struct {
	Clusters int
	// Demo plays the story once the first release completed.
	Demo bool
	// OCI delivers the package as signed OCI artifacts.
	OCI bool
	// Helm delivers the package as a signed Helm chart, installed by helm-controller.
	Helm bool
	// Dir is the sandbox's directory, absolute.
	Dir string
	// Testbin is the directory of the test binaries (--testbin); empty to find them.
	Testbin string
	// RunArgs run the background process from the root command (["sandbox", "run"]).
	RunArgs []string
}

// Args are the arguments that ask tidegate-sandbox the same.
func (o UpOptions) Args() []string {
	args := []string{"up", "--clusters", strconv.Itoa(o.Clusters), "--dir", o.Dir, "--testbin", o.Testbin}
	if o.Demo {
		args = append(args, "--demo")
	}
	return append(args, deliveryArgs(o.OCI, o.Helm)...)
}

// deliveryArgs are the flags that ask for the package's delivery.
func deliveryArgs(oci, helm bool) []string {
	var args []string
	if oci {
		args = append(args, "--oci")
	}
	if helm {
		args = append(args, "--helm")
	}
	return args
}

// RunOptions are what `sandbox run`, the background process, was asked.
type RunOptions struct {
	Clusters int
	OCI      bool
	Helm     bool
	// Dir is the sandbox's directory, absolute.
	Dir     string
	Testbin string
}

// Args are the arguments, after the command's own (RunArgs), that ask the same.
func (o RunOptions) Args() []string {
	args := []string{"--clusters", strconv.Itoa(o.Clusters), "--dir", o.Dir, "--testbin", o.Testbin}
	return append(args, deliveryArgs(o.OCI, o.Helm)...)
}

// checkDelivery refuses --oci with --helm: the package is delivered one way.
func checkDelivery(oci, helm bool) error {
	if oci && helm {
		return usage("--oci and --helm cannot be used together: --helm delivers the package as a Helm chart, which is an OCI artifact too (signed and verified as --oci's are); choose one")
	}
	return nil
}

// Actions do what the commands say, once their flags are checked. Each gets its command for its
// context and streams.
type Actions interface {
	Up(cmd *cobra.Command, o UpOptions) error
	Run(cmd *cobra.Command, o RunOptions) error
	Status(cmd *cobra.Command, dir string) error
	Down(cmd *cobra.Command, dir string) error
}

const commandLong = `sandbox runs a whole fleet on this machine, as a background process: a hub and N member
clusters (a kube-apiserver and etcd each), Flux's source-controller and kustomize-controller on the
hub, a Git server holding a demo fleet, the tidegate controller, a workload simulator that plays
the members' kubelets (they have no nodes) and their service traffic, and a Prometheus scraping that
traffic every second (sandbox status says where). The demo fleet is three repositories (fleet, podinfo,
platform-policies) that Flux applies: the rollout podinfo takes the package to the members in three
waves, and the fleet changes by commits.

The sandbox is a binary of its own, tidegate-sandbox, built beside tidegate by ` + "`make build`" + `
(or ` + "`go install ./cmd/tidegate-sandbox`" + `): it links the controller, Flux's libraries and the
local fleet, which the command line does without. tidegate sandbox runs the tidegate-sandbox found
beside its own executable, else on PATH.

It needs the binaries ` + "`make testbin`" + ` builds (about 30 minutes the first time), and finds them
in the directory --testbin names, else in $TIDEGATE_TESTBIN, else in the newest complete build in
the cache of ` + "`make testbin`" + ` (~/.cache/tidegate/testbin, or $TIDEGATE_TESTBIN_CACHE), so a
tidegate binary runs it from anywhere.`

// NewCommand returns the `sandbox` command: up, status, down, and the hidden run that is the
// background process, each doing what a does.
func NewCommand(a Actions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Run a local fleet with Flux, tidegate and a demo, on this machine",
		Long:  commandLong,
	}
	run := newRunCommand(a)
	cmd.AddCommand(newUpCommand(a, run), newStatusCommand(a), newDownCommand(a), run)
	return cmd
}

// DefaultDir is the sandbox's directory when --dir is not given.
func DefaultDir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "tidegate-sandbox")
	}
	return filepath.Join(home, ".tidegate", "sandbox")
}

func addDirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "dir", DefaultDir(), "the sandbox's directory: state, kubeconfig, logs")
	// The help and docs/cli.md say where the default is for whoever reads them, not on this machine.
	cmd.Flags().Lookup("dir").DefValue = "$HOME/.tidegate/sandbox"
}

func absDir(dir string) (string, error) {
	if dir == "" {
		return "", usage("--dir must not be empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usage("--dir %s: %v", dir, err)
	}
	return abs, nil
}

func newUpCommand(a Actions, run *cobra.Command) *cobra.Command {
	var o UpOptions
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the sandbox in the background and roll out the demo's first release",
		Long: `up starts the sandbox as a background process (its output goes to DIR/sandbox.log), waits until
the hub answers and Flux applied the demo fleet, and follows the first rollout of podinfo (v1)
until it completes. It then says how to look around; the sandbox runs until ` + "`sandbox down`" + `.

With --demo it then plays the story against the running sandbox, a commit at a time, showing every
change of wave, gate and phase as it happens: v2 passes every gate wave by wave; v3 loses
availability on the canary, fails noDisruption and is rolled back; v4 stays available but answers
30 % of its requests with errors, fails noDisruption on the canary's error ratio (measured by
Prometheus against the clusters still at v2) and is rolled back; v5 changes a StatefulSet's
volumeClaimTemplates, is blocked by rollbackSafe before its first wave, is approved, and completes.
It ends with a table of every gate decision and its receipt.

With --oci the package is not read from Git: each release of podinfo is pushed to the sandbox's
OCI registry as a Flux OCI artifact and signed with a cosign key made in DIR (cosign.key,
cosign.pub), and the rollout's OCIRepository has source-controller verify the signature
(spec.verify): every wave runs on OCI digests, and deploySafe passes on the verified signature.

With --helm the package is a Helm chart of the same workload: the sandbox also runs Flux's
helm-controller, each release of podinfo is a chart version (0.1.0, 0.2.0, …; appVersion v1, v2,
…) pushed to the sandbox's registry as helm push does and signed with the cosign key in DIR, the
OCIRepository follows the highest version and verifies its signature, and the rollout installs the
chart (spec.chart) as one HelmRelease per member. The demo plays v2, v3 and v4 as chart versions;
it stops before v5, which a chart cannot release (sandbox up says why). --helm and --oci are
exclusive.`,
		Example: `  tidegate sandbox up
  tidegate sandbox up --demo
  tidegate sandbox up --demo --oci
  tidegate sandbox up --demo --helm
  tidegate sandbox up --clusters 5 --dir /tmp/sandbox`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Clusters < 1 || o.Clusters > maxClusters {
				return usage("--clusters must be between 1 and %d: each is an API server and an etcd on this machine", maxClusters)
			}
			if err := checkDelivery(o.OCI, o.Helm); err != nil {
				return err
			}
			dir, err := absDir(o.Dir)
			if err != nil {
				return err
			}
			o.Dir = dir
			o.RunArgs = commandArgs(run)
			return a.Up(cmd, o)
		},
	}
	cmd.Flags().IntVar(&o.Clusters, "clusters", defaultClusters, "how many member clusters")
	cmd.Flags().BoolVar(&o.Demo, "demo", false, "then play the demo story (v2 passes, v3 and v4 are rolled back, v5 needs an approval)")
	cmd.Flags().BoolVar(&o.OCI, "oci", false, "deliver the package as signed Flux OCI artifacts from the sandbox's registry, verified by source-controller with cosign")
	cmd.Flags().BoolVar(&o.Helm, "helm", false, "deliver the package as a signed Helm chart from the sandbox's registry, installed by helm-controller (not with --oci)")
	addDirFlag(cmd, &o.Dir)
	addTestbinFlag(cmd, &o.Testbin)
	return cmd
}

// commandArgs are the arguments that run cmd from its root command: ["sandbox", "run"].
func commandArgs(cmd *cobra.Command) []string {
	return strings.Fields(cmd.CommandPath())[1:]
}

func newRunCommand(a Actions) *cobra.Command {
	var o RunOptions
	cmd := &cobra.Command{
		Use:    "run",
		Short:  "The sandbox's background process (started by sandbox up)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkDelivery(o.OCI, o.Helm); err != nil {
				return err
			}
			abs, err := absDir(o.Dir)
			if err != nil {
				return err
			}
			o.Dir = abs
			return a.Run(cmd, o)
		},
	}
	cmd.Flags().IntVar(&o.Clusters, "clusters", defaultClusters, "how many member clusters")
	cmd.Flags().BoolVar(&o.OCI, "oci", false, "deliver the package as signed Flux OCI artifacts")
	cmd.Flags().BoolVar(&o.Helm, "helm", false, "deliver the package as a signed Helm chart, installed by helm-controller")
	addDirFlag(cmd, &o.Dir)
	addTestbinFlag(cmd, &o.Testbin)
	return cmd
}

// testbinDirEnv is internal/testbin's DirEnv, which this package names without linking testbin (and
// envtest with it) into the CLI; a test keeps the two the same.
const testbinDirEnv = "TIDEGATE_TESTBIN"

// addTestbinFlag adds --testbin, for a binary run where neither $TIDEGATE_TESTBIN nor the cache of
// `make testbin` finds the test binaries (another user's cache, a copied directory).
func addTestbinFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "testbin", "", "the directory `DIR` of the binaries make testbin built (hack/testbin.sh --print-dir prints it); "+
		"default $"+testbinDirEnv+", else the newest build in ~/.cache/tidegate/testbin")
}

func newStatusCommand(a Actions) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Say whether the sandbox runs, and show its clusters and rollouts",
		Long: `status says whether the sandbox's background process runs and its hub answers, where its
Prometheus is, and shows the member clusters and the rollouts in a short table. It exits 1 when no
sandbox runs in DIR.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := absDir(dir)
			if err != nil {
				return err
			}
			return a.Status(cmd, abs)
		},
	}
	addDirFlag(cmd, &dir)
	return cmd
}

func newDownCommand(a Actions) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the sandbox and remove its state (the logs are kept)",
		Long: `down stops the sandbox's background process (SIGTERM), which stops every API server, etcd and
Flux controller of the fleet, waits until it is gone, and removes the state and the kubeconfig. The
logs stay in DIR/logs. Running it when no sandbox runs is not an error: it says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := absDir(dir)
			if err != nil {
				return err
			}
			return a.Down(cmd, abs)
		},
	}
	addDirFlag(cmd, &dir)
	return cmd
}
