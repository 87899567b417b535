// Package bounded loads and evaluates tenants' CUE policies in a child process under a time and
// memory budget, so that no policy can stop the controller that evaluates it.
//
// A CUE evaluation cannot be cancelled and its memory cannot be capped in-process: a
// comprehension over list.Range(0, 1e9) runs one core until it is done and takes what memory it
// needs. So the controller runs each load and each evaluation of a tenant's policy in a child: the
// running executable started again with TIDEGATE_POLICY_WORKER set, which this package's init
// turns into a worker before main (or a test binary's TestMain) runs. The child reads one request
// on stdin and writes one response on stdout. It watches its own memory and exits when it passes
// the budget; the parent kills it when it passes the time budget. Either way the caller gets a
// *BudgetError, and the controller carries on.
//
// Any binary that imports this package (the controller, every test binary of a package that
// imports the controllers) can be its own worker; nothing else has to be installed.
package bounded

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
	"time"

	tgcue "github.com/tidegate/tidegate/cue"
)

// workerEnv, set in a child's environment, makes the process a worker (init); its value is the
// memory budget in bytes.
const workerEnv = "TIDEGATE_POLICY_WORKER"

// exitOverBudget is the exit code of a worker that passed its memory budget.
const exitOverBudget = 86

// errOverTime is the cause of a worker's context ending at its time budget.
var errOverTime = errors.New("the policy budget's time passed")

// maxResponse bounds what the parent reads of a worker's response.
const maxResponse = 4 << 20

// Budget bounds one load or evaluation of a policy.
type Budget struct {
	// Time is the wall-clock time the worker may take, its start included.
	Time time.Duration
	// Memory is the most memory the worker's Go runtime may hold (runtime/metrics
	// /memory/classes/total:bytes), in bytes.
	Memory int64
}

// DefaultBudget is the budget of the controller's flags' defaults: 10 s and 256 MiB. The built-in
// policy decides a 1,000-cluster wave's evidence well within it; four workers at once (the
// controller's concurrent reconciles) stay within the shipped manager's 1 GiB limit with the
// manager's own memory.
var DefaultBudget = Budget{Time: 10 * time.Second, Memory: 256 << 20}

func (b Budget) String() string {
	return fmt.Sprintf("%s and %d MiB", b.Time, b.Memory>>20)
}

// BudgetError says a load or an evaluation passed its budget.
type BudgetError struct {
	// Op is "loading the policy" or "evaluating the <gate> gate".
	Op string
	// Exceeded is "time" or "memory".
	Exceeded string
	Budget   Budget
}

func (e *BudgetError) Error() string {
	limit := e.Budget.Time.String()
	if e.Exceeded == "memory" {
		limit = fmt.Sprintf("%d MiB", e.Budget.Memory>>20)
	}
	return fmt.Sprintf("%s exceeded the policy budget of %s %s (budget %s; --policy-time-budget, --policy-memory-budget): make the policy cheaper, e.g. without comprehensions over large ranges",
		e.Op, limit, e.Exceeded, e.Budget)
}

// Evaluator loads and evaluates policies in worker processes under Budget.
type Evaluator struct {
	Budget Budget
	// Executable is the worker binary; empty is the running executable (os.Executable).
	Executable string
}

type request struct {
	Files    map[string][]byte `json:"files"`
	Gate     string            `json:"gate,omitempty"`
	Evidence json.RawMessage   `json:"evidence,omitempty"`
}

type response struct {
	Decision *tgcue.Decision `json:"decision,omitempty"`
	// Problems are a *tgcue.PolicyError's, with its Digest.
	Problems []string `json:"problems,omitempty"`
	Digest   string   `json:"digest,omitempty"`
	// Error is any other error.
	Error string `json:"error,omitempty"`
}

// Load checks, in a worker, that files load as a policy (tgcue.LoadPolicy) within the budget. A
// policy that does not load is a *tgcue.PolicyError, as LoadPolicy returns it; one that passes
// the budget a *BudgetError. Loading it in-process afterwards does the same work, now known to be
// bounded.
func (e *Evaluator) Load(ctx context.Context, files map[string][]byte) error {
	_, err := e.run(ctx, "loading the policy", request{Files: files})
	return err
}

// Evaluate decides gate under p over evidence in a worker, as tgcue.Evaluate does in-process.
func (e *Evaluator) Evaluate(ctx context.Context, p *tgcue.Policy, gate string, evidence any) (tgcue.Decision, error) {
	raw, err := json.Marshal(evidence)
	if err != nil {
		return tgcue.Decision{}, fmt.Errorf("encoding the %s evidence: %w", gate, err)
	}
	res, err := e.run(ctx, "evaluating the "+gate+" gate", request{Files: p.Sources(), Gate: gate, Evidence: raw})
	if err != nil {
		return tgcue.Decision{}, err
	}
	if res.Decision == nil {
		return tgcue.Decision{}, fmt.Errorf("evaluating the %s gate: the policy worker returned no decision", gate)
	}
	return *res.Decision, nil
}

func (e *Evaluator) run(ctx context.Context, op string, req request) (*response, error) {
	exe := e.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("%s: finding the policy worker: %w", op, err)
		}
	}
	in, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, e.Budget.Time, errOverTime)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), workerEnv+"="+strconv.FormatInt(e.Budget.Memory, 10))
	cmd.Stdin = bytes.NewReader(in)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limitedWriter{w: &out, n: maxResponse}, &limitedWriter{w: &stderr, n: 4 << 10}
	cmd.WaitDelay = time.Second
	runErr := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.Is(context.Cause(ctx), errOverTime):
		return nil, &BudgetError{Op: op, Exceeded: "time", Budget: e.Budget}
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s: %w", op, context.Cause(ctx))
	case errors.As(runErr, &exit) && exit.ExitCode() == exitOverBudget:
		return nil, &BudgetError{Op: op, Exceeded: "memory", Budget: e.Budget}
	case runErr != nil:
		return nil, fmt.Errorf("%s: the policy worker failed: %w: %s", op, runErr, bytes.TrimSpace(stderr.Bytes()))
	}
	var res response
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("%s: reading the policy worker's answer: %w", op, err)
	}
	switch {
	case len(res.Problems) > 0:
		return nil, &tgcue.PolicyError{Digest: res.Digest, Problems: res.Problems}
	case res.Error != "":
		return nil, fmt.Errorf("%s: %s", op, res.Error)
	}
	return &res, nil
}

// limitedWriter keeps the first n bytes written to it and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		if _, err := l.w.Write(p[:k]); err != nil {
			return 0, err
		}
		l.n -= k
	}
	return len(p), nil
}

func init() {
	if v := os.Getenv(workerEnv); v != "" {
		limit, err := strconv.ParseInt(v, 10, 64)
		if err != nil || limit <= 0 {
			fmt.Fprintf(os.Stderr, "%s=%q is not a memory budget in bytes\n", workerEnv, v)
			os.Exit(2)
		}
		os.Exit(serve(os.Stdin, os.Stdout, limit))
	}
}

// serve is a worker: one request from r, one response to w, within limit bytes of memory.
func serve(r io.Reader, w io.Writer, limit int64) int {
	debug.SetMemoryLimit(limit)
	go watchMemory(limit)
	var req request
	if err := json.NewDecoder(io.LimitReader(r, 2*tgcue.MaxEvidenceBytes+2*tgcue.MaxPolicyBytes)).Decode(&req); err != nil {
		fmt.Fprintf(os.Stderr, "reading the request: %v\n", err)
		return 2
	}
	res := answer(req)
	if err := json.NewEncoder(w).Encode(res); err != nil {
		fmt.Fprintf(os.Stderr, "writing the response: %v\n", err)
		return 2
	}
	return 0
}

func answer(req request) response {
	p, err := tgcue.LoadPolicy(req.Files)
	var perr *tgcue.PolicyError
	switch {
	case errors.As(err, &perr):
		return response{Problems: perr.Problems, Digest: perr.Digest}
	case err != nil:
		return response{Error: err.Error()}
	case req.Gate == "":
		return response{}
	}
	d, err := tgcue.Evaluate(p, req.Gate, req.Evidence)
	switch {
	case errors.As(err, &perr):
		return response{Problems: perr.Problems, Digest: perr.Digest}
	case err != nil:
		return response{Error: err.Error()}
	}
	return response{Decision: &d}
}

// watchMemory ends the worker once the memory its runtime holds passes limit. A CUE evaluation
// allocates as it goes, so a look every 5 ms stops it within a few MiB of the limit.
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
