// Command tidegate is the command line for tidegate, confidence-gated fleet rollouts on Flux.
//
// It reads FleetRollouts, FleetClusters and GateReceipts on the hub cluster (`get`, `status`,
// `tree`, `revision`, `events`, `receipts explain`), previews a change against an exact artifact
// or a receipt's evidence (`preview`), changes a rollout's spec or annotations the way a Git
// commit would (`hold`, `resume`, `suspend`, `approve`, `rollback`, `retry`, `reconcile`), checks
// that a receipt still has the content it was named after (`receipts verify`), and lets a
// platform team check a CUE policy edit, locally or in CI, before committing it (`policy vet`,
// `policy eval`, `policy test`, `policy replay`).
//
// Exit codes mean something: 0 success, 1 the answer is no (a failed gate, a rollout that is not
// Ready, a receipt that does not verify, a reconcile that timed out, an invalid policy), 2 the
// question could not be asked (usage, unreadable input, an API error, a policy that cannot decide).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/internal/sandboxcmd"
)

// Exit codes.
const (
	exitOK    = 0
	exitNo    = 1
	exitUsage = 2
)

func main() {
	silenceClientLogs()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env := defaultEnv()
	env.displayName = pluginDisplayName(os.Args[0])
	code := runContext(ctx, env, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cliEnv is what the commands take from their surroundings; tests replace it to make the output
// deterministic and the waits short.
type cliEnv struct {
	// now is the clock: ages, "since" durations and the values of rollback, retry and reconcile requests.
	now func() time.Time
	// pollInterval is how often `status --watch` and `reconcile` look at the rollout again.
	pollInterval time.Duration
	// displayName, when set, replaces "tidegate" in usage lines and help: "flux fleet" when the
	// binary runs as the Flux CLI plugin flux-fleet.
	displayName string
}

func defaultEnv() *cliEnv {
	return &cliEnv{now: time.Now, pollInterval: 2 * time.Second}
}

// pluginDisplayName is "flux NAME" when the binary is named flux-NAME, as the Flux CLI (2.9 and
// later) runs its plugins (`flux fleet ...` executes flux-fleet), else "".
func pluginDisplayName(argv0 string) string {
	name, ok := strings.CutPrefix(filepath.Base(argv0), "flux-")
	if !ok || name == "" {
		return ""
	}
	return "flux " + name
}

// run executes the command line and returns its exit code; tests call it with buffers.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runContext(context.Background(), defaultEnv(), args, stdin, stdout, stderr)
}

// runContext is run with a context (cancelled on an interrupt) and an environment.
func runContext(ctx context.Context, env *cliEnv, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(env)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "error: %v\n", ee.err)
			if jsonOutput(cmd) && !ee.inOutput {
				writeErrorJSON(stdout, ee)
			}
		}
		return ee.code
	}
	// tidegate-sandbox, which the sandbox commands run, printed its own error: its code is passed on.
	var exited *sandboxcmd.Exited
	if errors.As(err, &exited) {
		return exited.Code
	}
	// The sandbox's errors carry their own exit code (1: the story failed, 2: usage).
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return coded.ExitCode()
	}
	// Cobra's own errors: unknown commands and flags, wrong argument counts.
	fmt.Fprintf(stderr, "error: %v\nRun '%s --help' for usage.\n", err, root.CommandPath())
	return exitUsage
}

// jsonOutput tells whether cmd was asked for -o json (explicitly: a command whose output is JSON
// anyway, such as receipts evidence, keeps its errors on stderr).
func jsonOutput(cmd *cobra.Command) bool {
	f := cmd.Flags().Lookup("output")
	return f != nil && f.Changed && f.Value.String() == "json"
}

// writeErrorJSON prints, for a command asked for -o json, the error as {"error": {"code",
// "message", "object"}} on stdout, where the JSON of a success goes: the code is the error's own
// (an API error's, a write's), else Invalid for a question that could not be asked (exit code 2)
// and Unmet for an answer that is no (exit code 1). The message is also on stderr, and the exit code is unchanged.
func writeErrorJSON(w io.Writer, ee *exitError) {
	var oe *ops.Error
	if !errors.As(ee.err, &oe) {
		code := ops.CodeUnmet
		if ee.code == exitUsage {
			code = ops.CodeInvalid
		}
		oe = ops.NewError(code, nil, ee.err.Error(), ee.err)
	}
	_ = writeJSON(w, map[string]*ops.Error{"error": oe})
}

// exitError carries an exit code out of a command; err, when set, is printed on stderr.
type exitError struct {
	code int
	err  error
	// inOutput: the command's -o json document already carries err; it is not printed again.
	inOutput bool
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// rootLong is the root command's help; docs/cli.md repeats it.
const rootLong = `tidegate moves one Flux package across a fleet of clusters wave by wave, and lets a wave go only
when its gates pass (deploySafe, rollbackSafe, rollbackSucceeds, noDisruption). This command line
reads FleetRollouts, FleetClusters and GateReceipts on the hub cluster, explains gate decisions,
previews changes, changes a rollout's spec the way a Git commit would, verifies receipts, and
checks CUE policies; tidegate mcp serves the same reads and writes to AI assistants and
automation, and tidegate version says what runs where.

It reaches the hub like kubectl and flux do: --kubeconfig (else $KUBECONFIG, else ~/.kube/config),
--context, and -n/--namespace (else the namespace of the kubeconfig context, else "default").

Output: tables for people; -o json, -o yaml or -o jsonpath=TEMPLATE on every read command for
machines, with the same fields unabbreviated (full revisions, timestamps instead of ages); get also
has -o name, -o wide, -l SELECTOR and -w/--watch. Asked for -o json, a command that
fails also prints {"error": {"code", "message", "object"}} on stdout, the code one of those of
tidegate mcp (docs/mcp.md) or Unmet for an answer that is no.

Writes (hold, resume, suspend, approve, rollback, retry, reconcile) are merge patches of the
rollout's spec or annotations, with field manager "tidegate-cli"; they never write status. Each
returns a job handle (-o json); --wait follows it until the rollout settled or waits for an approval.

Exit codes:
  0  success
  1  the answer is no: a gate failed, the rollout is not Ready (status, reconcile),
     a receipt does not verify, a reconcile timed out, a policy is invalid
  2  the question could not be asked: usage, unreadable input, an API error (not found,
     forbidden, no connection), a policy that cannot decide`

func newRootCommand(env *cliEnv) *cobra.Command {
	root := &cobra.Command{
		Use:           "tidegate",
		Short:         "Confidence-gated fleet rollouts on Flux",
		Long:          rootLong,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	k := newKubeOptions(env)
	k.addFlags(root)
	root.AddCommand(
		newGetCommand(k),
		newStatusCommand(k),
		newTreeCommand(k),
		newRevisionCommand(k),
		newEventsCommand(k),
		newHoldCommand(k),
		newResumeCommand(k),
		newSuspendCommand(k),
		newApproveCommand(k),
		newRollbackCommand(k),
		newRetryCommand(k),
		newReconcileCommand(k),
		newReceiptsCommand(k),
		newPreviewCommand(k),
		newMCPCommand(k),
		newVersionCommand(k),
		newCheckCommand(k),
		newPolicyCommand(k),
		sandboxcmd.NewCommand(sandboxcmd.Exec{}),
		newDocsCommand(),
	)
	addCompletions(root, k)
	if env.displayName != "" {
		renameRoot(root, env.displayName)
	}
	return root
}

// renameRoot makes usage lines, help and examples say name (such as "flux fleet") instead of "tidegate".
func renameRoot(root *cobra.Command, name string) {
	root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: name}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Example = strings.ReplaceAll("\n"+c.Example, "\n  tidegate ", "\n  "+name+" ")[1:]
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
