// Package worker runs one piece of a tenant's work (a policy's load or evaluation, a package's
// render) in a child process under a time and memory budget, so that no tenant's input can stop
// the controller that does the work.
//
// Neither a CUE evaluation nor a kustomize build can be cancelled, and neither's memory can be
// capped in-process. So the work runs in a child: the running executable started again with
// TIDEGATE_WORKER=<kind>:<memory bytes>, which the init of the package that does that kind of work
// (Kind.Serve) turns into a worker before main (or a test binary's TestMain) runs. The child reads
// one request on stdin and writes one response on stdout. It watches its own memory and exits when
// it passes the budget; the parent kills it when it passes the time budget, and stops reading its
// response past the kind's size. Each way the caller gets a *BudgetError, and the controller
// carries on.
//
// Any binary that imports a kind's package (the controller, every test binary of a package that
// imports the controllers) can be its own worker; nothing else has to be installed.
package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// envName, set in a child's environment, makes the process a worker of one kind (Kind.Serve); its
// value is "<kind>:<memory budget in bytes>".
const envName = "TIDEGATE_WORKER"

// exitOverBudget is the exit code of a worker that passed its memory budget.
const exitOverBudget = 86

// errOverTime is the cause of a worker's context ending at its time budget.
var errOverTime = errors.New("the worker's time budget passed")

// Budget bounds one piece of work.
type Budget struct {
	// Time is the wall-clock time the worker may take, its start included.
	Time time.Duration
	// Memory is the most memory the worker's Go runtime may hold (runtime/metrics
	// /memory/classes/total:bytes), in bytes.
	Memory int64
}

func (b Budget) String() string {
	return fmt.Sprintf("%s and %d MiB", b.Time, b.Memory>>20)
}

// Kind is one kind of work done in workers.
type Kind struct {
	// Name names the kind's budget in errors ("policy": "the policy budget") and selects the
	// worker's handler.
	Name string
	// Flags are the flags that set the budget, for errors.
	Flags string
	// Advice ends a BudgetError: what the tenant can do.
	Advice string
	// MaxRequest bounds what a worker reads of its request; MaxResponse what the parent reads of
	// the answer, past which the work passed its budget.
	MaxRequest  int64
	MaxResponse int
}

// BudgetError says a piece of work passed its budget.
type BudgetError struct {
	// Op is what was done: "loading the policy", "rendering the candidate".
	Op string
	// Exceeded is "time", "memory" or "output".
	Exceeded string
	Budget   Budget
	// Kind is the kind of work whose budget it was.
	Kind *Kind
}

func (e *BudgetError) Error() string {
	limit := e.Budget.Time.String()
	switch e.Exceeded {
	case "memory":
		limit = fmt.Sprintf("%d MiB", e.Budget.Memory>>20)
	case "output":
		limit = fmt.Sprintf("%d MiB", e.Kind.MaxResponse>>20)
	}
	return fmt.Sprintf("%s exceeded the %s budget of %s %s (budget %s; %s): %s",
		e.Op, e.Kind.Name, limit, e.Exceeded, e.Budget, e.Kind.Flags, e.Kind.Advice)
}

// Run does op in a worker of exe (empty: the running executable) under budget: send writes the
// request to the worker, and the worker's JSON answer is decoded into out. Past the budget the
// error is a *BudgetError; any other error is the worker's failure or ctx's end.
func (k *Kind) Run(ctx context.Context, exe, op string, budget Budget, send func(io.Writer) error, out any) error {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("%s: finding the %s worker: %w", op, k.Name, err)
		}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, budget.Time, errOverTime)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), envName+"="+k.Name+":"+strconv.FormatInt(budget.Memory, 10))
	// The request is written as the worker reads it: the parent never holds all of it encoded.
	pr, pw := io.Pipe()
	defer func() { _ = pr.Close() }()
	go func() { _ = pw.CloseWithError(send(pw)) }()
	cmd.Stdin = pr
	var stdout, stderr bytes.Buffer
	res := &limitedWriter{w: &stdout, n: k.MaxResponse}
	cmd.Stdout, cmd.Stderr = res, &limitedWriter{w: &stderr, n: 4 << 10}
	cmd.WaitDelay = time.Second
	runErr := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.Is(context.Cause(ctx), errOverTime):
		return &BudgetError{Op: op, Exceeded: "time", Budget: budget, Kind: k}
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", op, context.Cause(ctx))
	case errors.As(runErr, &exit) && exit.ExitCode() == exitOverBudget:
		return &BudgetError{Op: op, Exceeded: "memory", Budget: budget, Kind: k}
	case runErr != nil:
		return fmt.Errorf("%s: the %s worker failed: %w: %s", op, k.Name, runErr, bytes.TrimSpace(stderr.Bytes()))
	case res.dropped:
		return &BudgetError{Op: op, Exceeded: "output", Budget: budget, Kind: k}
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("%s: reading the %s worker's answer: %w", op, k.Name, err)
	}
	return nil
}

// limitedWriter keeps the first n bytes written to it and drops the rest.
type limitedWriter struct {
	w       io.Writer
	n       int
	dropped bool
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	k := min(len(p), l.n)
	if k > 0 {
		if _, err := l.w.Write(p[:k]); err != nil {
			return 0, err
		}
		l.n -= k
	}
	if k < len(p) {
		l.dropped = true
	}
	return len(p), nil
}

// Serve makes this process a worker of k when its environment asks for one: handle reads the
// request (at most MaxRequest bytes) and writes the answer, within the memory budget, and the
// process exits. It returns at once in any other process. Call it from the init of the package
// that does k's work, so that it runs before main.
func (k *Kind) Serve(handle func(r io.Reader, w io.Writer) error) {
	kind, v, ok := strings.Cut(os.Getenv(envName), ":")
	if !ok || kind != k.Name {
		return
	}
	limit, err := strconv.ParseInt(v, 10, 64)
	if err != nil || limit <= 0 {
		fmt.Fprintf(os.Stderr, "%s=%s:%q: not a memory budget in bytes\n", envName, kind, v)
		os.Exit(2)
	}
	debug.SetMemoryLimit(limit)
	go watchMemory(limit)
	if err := handle(io.LimitReader(os.Stdin, k.MaxRequest), os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s worker: %v\n", k.Name, err)
		os.Exit(2)
	}
	os.Exit(0)
}

// watchMemory ends the worker once the memory its runtime holds passes limit. CUE and kustomize
// allocate as they go, so a look every 5 ms stops them within a few MiB of the limit.
func watchMemory(limit int64) {
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 && int64(sample[0].Value.Uint64()) > limit {
			fmt.Fprintf(os.Stderr, "memory over the budget of %d bytes\n", limit)
			os.Exit(exitOverBudget)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
