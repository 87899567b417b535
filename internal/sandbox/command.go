package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidegate/tidegate/internal/sandboxcmd"
	"github.com/tidegate/tidegate/internal/testbin"
)

// Error ends a sandbox command with an exit code (sandboxcmd.Error).
type Error = sandboxcmd.Error

func failed(format string, args ...any) error { return sandboxcmd.Failed(format, args...) }

// NewCommand returns the `sandbox` command (sandboxcmd.NewCommand), doing its work in this
// process: tidegate-sandbox's root, and its tests'.
func NewCommand() *cobra.Command { return sandboxcmd.NewCommand(actions{}) }

// Execute runs root with args and returns the process's exit code: 0, else the code of the
// command's error (sandboxcmd.Error), else 2 for cobra's own (an unknown command or flag). The
// error goes to stderr.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "error: %v\n", err)
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 2
}

// actions are the sandbox's commands done here.
type actions struct{}

func (actions) Up(cmd *cobra.Command, o sandboxcmd.UpOptions) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err := up(ctx, cmd.OutOrStdout(), upOptions{clusters: o.Clusters, demo: o.Demo, oci: o.OCI, helm: o.Helm, dir: o.Dir,
		testbin: o.Testbin, runArgs: o.RunArgs, cli: sandboxcmd.CLI()})
	return err
}

func (actions) Run(cmd *cobra.Command, o sandboxcmd.RunOptions) error {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return failed("creating %s: %v", o.Dir, err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if v := os.Getenv(watchPIDEnv); v != "" {
		pid, err := strconv.Atoi(v)
		if err != nil || pid <= 0 {
			return &Error{Code: 2, Err: fmt.Errorf("%s=%q is not a pid", watchPIDEnv, v)}
		}
		ctx = stopWhenGone(ctx, pid)
	}
	if err := runBackground(ctx, o, cmd.ErrOrStderr()); err != nil {
		return &Error{Code: 1, Err: err}
	}
	return nil
}

func (actions) Status(cmd *cobra.Command, dir string) error {
	return status(cmd.Context(), cmd.OutOrStdout(), dir)
}

func (actions) Down(cmd *cobra.Command, dir string) error {
	return down(cmd.Context(), cmd.OutOrStdout(), dir)
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

// sandboxCmd is how to run `sandbox sub` on the sandbox in dir, for hints: with --dir unless dir is
// the default.
func sandboxCmd(cli, sub, dir string) string {
	c := "`" + cli + " sandbox " + sub
	if dir != sandboxcmd.DefaultDir() {
		c += " --dir " + dir
	}
	return c + "`"
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
