package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidegate/tidegate/internal/testbin"
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

func failed(format string, args ...any) error {
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

const commandLong = `sandbox runs a whole fleet on this machine, as a background process: a hub and N member
clusters (a kube-apiserver and etcd each), Flux's source-controller and kustomize-controller on the
hub, a Git server holding a demo fleet, the tidegate controller, and a workload simulator that plays
the members' kubelets (they have no nodes). The demo fleet is three repositories (fleet, podinfo,
platform-policies) that Flux applies: the rollout podinfo takes the package to the members in three
waves, and the fleet changes by commits.

It needs the binaries ` + "`make testbin`" + ` builds (about 30 minutes the first time), and finds them
in the directory --testbin names, else in $TIDEGATE_TESTBIN, else in the newest complete build in
the cache of ` + "`make testbin`" + ` (~/.cache/tidegate/testbin, or $TIDEGATE_TESTBIN_CACHE), so a
tidegate binary runs it from anywhere.`

// NewCommand returns the `sandbox` command: up, status, down, and the hidden run that is the
// background process.
func NewCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Run a local fleet with Flux, tidegate and a demo, on this machine",
		Long:  commandLong,
	}
	run := newRunCommand()
	cmd.AddCommand(newUpCommand(run), newStatusCommand(), newDownCommand(), run)
	return cmd
}

func defaultDir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "tidegate-sandbox")
	}
	return filepath.Join(home, ".tidegate", "sandbox")
}

// invokedAs is how the user's shell runs this binary again, for the hints the sandbox prints: name
// when name on PATH is this binary, else the path it was started by (bin/tidegate after make demo,
// which puts nothing on PATH).
func invokedAs(name string) string {
	self, err := os.Executable()
	if err != nil {
		return name
	}
	if p, err := exec.LookPath(name); err == nil && sameFile(p, self) {
		return name
	}
	if strings.ContainsRune(os.Args[0], filepath.Separator) {
		return os.Args[0]
	}
	return self
}

// fluxCommand is how the user's shell runs the Flux CLI: flux when it is on PATH, else the one
// make testbin built, else "" (there is none to run).
func fluxCommand() string {
	if _, err := exec.LookPath("flux"); err == nil {
		return "flux"
	}
	if p, err := testbin.FluxCLI(); err == nil {
		return p
	}
	return ""
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

func addDirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "dir", defaultDir(), "the sandbox's directory: state, kubeconfig, logs")
	// The help and docs/cli.md say where the default is for whoever reads them, not on this machine.
	cmd.Flags().Lookup("dir").DefValue = "$HOME/.tidegate/sandbox"
}

// sandboxCmd is how to run `sandbox sub` on the sandbox in dir, for hints: with --dir unless dir is
// the default.
func sandboxCmd(cli, sub, dir string) string {
	c := "`" + cli + " sandbox " + sub
	if dir != defaultDir() {
		c += " --dir " + dir
	}
	return c + "`"
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

func newUpCommand(run *cobra.Command) *cobra.Command {
	var o upOptions
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the sandbox in the background and roll out the demo's first release",
		Long: `up starts the sandbox as a background process (its output goes to DIR/sandbox.log), waits until
the hub answers and Flux applied the demo fleet, and follows the first rollout of podinfo (v1)
until it completes. It then says how to look around; the sandbox runs until ` + "`sandbox down`" + `.

With --demo it then plays the story against the running sandbox, a commit at a time, showing every
change of wave, gate and phase as it happens: v2 passes every gate wave by wave; v3 loses
availability on the canary, fails noDisruption and is rolled back; v4 changes a StatefulSet's
volumeClaimTemplates, is blocked by rollbackSafe before its first wave, is approved, and completes.
It ends with a table of every gate decision and its receipt.

With --oci the package is not read from Git: each release of podinfo is pushed to the sandbox's
OCI registry as a Flux OCI artifact and signed with a cosign key made in DIR (cosign.key,
cosign.pub), and the rollout's OCIRepository has source-controller verify the signature
(spec.verify): every wave runs on OCI digests, and deploySafe passes on the verified signature.`,
		Example: `  tidegate sandbox up
  tidegate sandbox up --demo
  tidegate sandbox up --demo --oci
  tidegate sandbox up --clusters 5 --dir /tmp/sandbox`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.clusters < 1 || o.clusters > maxClusters {
				return usage("--clusters must be between 1 and %d: each is an API server and an etcd on this machine", maxClusters)
			}
			dir, err := absDir(o.dir)
			if err != nil {
				return err
			}
			o.dir = dir
			o.runArgs = commandArgs(run)
			o.cli = invokedAs(cmd.Root().Name())
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			_, err = up(ctx, cmd.OutOrStdout(), o)
			return err
		},
	}
	cmd.Flags().IntVar(&o.clusters, "clusters", defaultClusters, "how many member clusters")
	cmd.Flags().BoolVar(&o.demo, "demo", false, "then play the demo story (v2 passes, v3 is rolled back, v4 needs an approval)")
	cmd.Flags().BoolVar(&o.oci, "oci", false, "deliver the package as signed Flux OCI artifacts from the sandbox's registry, verified by source-controller with cosign")
	addDirFlag(cmd, &o.dir)
	addTestbinFlag(cmd, &o.testbin)
	return cmd
}

// commandArgs are the arguments that run cmd from its root command: ["sandbox", "run"].
func commandArgs(cmd *cobra.Command) []string {
	return strings.Fields(cmd.CommandPath())[1:]
}

func newRunCommand() *cobra.Command {
	var (
		clusters   int
		dir        string
		testbinDir string
		oci        bool
	)
	cmd := &cobra.Command{
		Use:    "run",
		Short:  "The sandbox's background process (started by sandbox up)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := absDir(dir)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(abs, 0o700); err != nil {
				return failed("creating %s: %v", abs, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if v := os.Getenv(watchPIDEnv); v != "" {
				pid, err := strconv.Atoi(v)
				if err != nil || pid <= 0 {
					return usage("%s=%q is not a pid", watchPIDEnv, v)
				}
				ctx = stopWhenGone(ctx, pid)
			}
			if err := runBackground(ctx, abs, clusters, testbinDir, oci, cmd.ErrOrStderr()); err != nil {
				return &Error{Code: 1, Err: err}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&clusters, "clusters", defaultClusters, "how many member clusters")
	cmd.Flags().BoolVar(&oci, "oci", false, "deliver the package as signed Flux OCI artifacts")
	addDirFlag(cmd, &dir)
	addTestbinFlag(cmd, &testbinDir)
	return cmd
}

// addTestbinFlag adds --testbin, for a binary run where neither $TIDEGATE_TESTBIN nor the cache of
// `make testbin` finds the test binaries (another user's cache, a copied directory).
func addTestbinFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "testbin", "", "the directory `DIR` of the binaries make testbin built (hack/testbin.sh --print-dir prints it); "+
		"default $"+testbin.DirEnv+", else the newest build in ~/.cache/tidegate/testbin")
}

// watchPIDEnv, set to a pid, makes the background process stop when that process is gone. The
// tests set it, so that a test binary killed by a timeout leaves no sandbox behind.
const watchPIDEnv = "TIDEGATE_SANDBOX_WATCH_PID"

// stopWhenGone returns a context that ends when ctx does or when process pid is gone.
func stopWhenGone(ctx context.Context, pid int) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for ctx.Err() == nil {
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				cancel(fmt.Errorf("process %d (%s) is gone", pid, watchPIDEnv))
				return
			}
			time.Sleep(time.Second)
		}
	}()
	return ctx
}

func newStatusCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Say whether the sandbox runs, and show its clusters and rollouts",
		Long: `status says whether the sandbox's background process runs and its hub answers, and shows the
member clusters and the rollouts in a short table. It exits 1 when no sandbox runs in DIR.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := absDir(dir)
			if err != nil {
				return err
			}
			return status(cmd.Context(), cmd.OutOrStdout(), abs)
		},
	}
	addDirFlag(cmd, &dir)
	return cmd
}

func newDownCommand() *cobra.Command {
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
			return down(cmd.Context(), cmd.OutOrStdout(), abs)
		},
	}
	addDirFlag(cmd, &dir)
	return cmd
}

// isReported tells whether err was already printed in detail by the command.
func isReported(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Reported
}
