package sandboxcmd

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// Binary is the sandbox's own binary, built beside tidegate.
const Binary = "tidegate-sandbox"

// CLIEnv tells tidegate-sandbox how the user's shell runs the tidegate CLI that started it, for the
// hints it prints (`tidegate sandbox down`, `tidegate approve …`).
const CLIEnv = "TIDEGATE_SANDBOX_CLI"

// Exited is the error of a tidegate-sandbox that ended with a code other than 0. It printed what
// went wrong itself; the CLI only passes the code on.
type Exited struct{ Code int }

func (e *Exited) Error() string { return fmt.Sprintf("%s exited %d", Binary, e.Code) }

// ExitCode is the process's exit code for this error.
func (e *Exited) ExitCode() int { return e.Code }

// Exec are the Actions of the tidegate CLI: each runs tidegate-sandbox (Find) with the same
// command and flags, on the command's streams, and waits for it. An interrupt of the CLI reaches
// tidegate-sandbox as one, so that `up` says what it leaves running.
type Exec struct{}

func (Exec) Up(cmd *cobra.Command, o UpOptions) error { return run(cmd, o.Args()) }

func (Exec) Run(cmd *cobra.Command, o RunOptions) error {
	return run(cmd, append([]string{"run"}, o.Args()...))
}

func (Exec) Status(cmd *cobra.Command, dir string) error {
	return run(cmd, []string{"status", "--dir", dir})
}

func (Exec) Down(cmd *cobra.Command, dir string) error {
	return run(cmd, []string{"down", "--dir", dir})
}

func run(cmd *cobra.Command, args []string) error {
	bin, err := Find()
	if err != nil {
		return &Error{Code: 1, Err: err}
	}
	c := exec.CommandContext(cmd.Context(), bin, args...)
	c.Stdin, c.Stdout, c.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	c.Env = append(os.Environ(), CLIEnv+"="+InvokedAs(cmd.Root().Name()))
	c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
	err = c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return &Exited{Code: ee.ExitCode()}
	}
	if err != nil {
		return &Error{Code: 1, Err: fmt.Errorf("running %s: %w", bin, err)}
	}
	return nil
}

// Find returns the tidegate-sandbox beside this process's executable, else the one on PATH, else
// an error that says how to build it.
func Find() (string, error) {
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), Binary)
		if fi, err := os.Stat(beside); err == nil && !fi.IsDir() {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(Binary); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("the sandbox is the binary %s, found neither beside this one nor on PATH: build it with `make build` "+
		"(bin/%s) or `go install ./cmd/%s` in a checkout of tidegate", Binary, Binary, Binary)
}

// InvokedAs is how the user's shell runs this binary again, for the hints the sandbox prints: name
// when name on PATH is this binary, else the path it was started by (bin/tidegate after make demo,
// which puts nothing on PATH).
func InvokedAs(name string) string {
	self, err := os.Executable()
	if err != nil {
		return name
	}
	return invoked(name, self, os.Args[0])
}

// invoked is how the user's shell runs the binary at path, started as started: name when name on
// PATH is that binary, else started when it is a path, else path.
func invoked(name, path, started string) string {
	if p, err := exec.LookPath(name); err == nil && sameFile(p, path) {
		return name
	}
	if strings.ContainsRune(started, filepath.Separator) {
		return started
	}
	return path
}

// CLI is how the user's shell runs the tidegate CLI, for the hints tidegate-sandbox prints: what the
// CLI that started it said ($TIDEGATE_SANDBOX_CLI), else the tidegate beside this binary, else
// "tidegate".
func CLI() string {
	if cli := os.Getenv(CLIEnv); cli != "" {
		return cli
	}
	self, err := os.Executable()
	if err != nil {
		return "tidegate"
	}
	beside := filepath.Join(filepath.Dir(self), "tidegate")
	if _, err := os.Stat(beside); err != nil {
		return "tidegate"
	}
	started := beside
	if strings.ContainsRune(os.Args[0], filepath.Separator) {
		started = filepath.Join(filepath.Dir(os.Args[0]), "tidegate")
	}
	return invoked("tidegate", beside, started)
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
