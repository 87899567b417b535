// Command tidegate is the command line for tidegate, confidence-gated fleet rollouts on Flux.
// This version carries the policy commands: `tidegate policy vet` and `tidegate policy eval` let a
// platform team check a CUE policy edit, locally or in CI, before committing it.
//
// Exit codes mean something: 0 success (a policy is valid, a gate passes), 1 the answer is no
// (an invalid policy, a failed gate), 2 the question could not be asked (usage, unreadable input,
// a policy that cannot decide).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK    = 0
	exitNo    = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the command line and returns its exit code; tests call it with buffers.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "error: %v\n", ee.err)
		}
		return ee.code
	}
	// Cobra's own errors: unknown commands and flags, wrong argument counts.
	fmt.Fprintf(stderr, "error: %v\nRun '%s --help' for usage.\n", err, root.CommandPath())
	return exitUsage
}

// exitError carries an exit code out of a command; err, when set, is printed on stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "tidegate",
		Short:         "Confidence-gated fleet rollouts on Flux",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newPolicyCommand())
	return root
}
