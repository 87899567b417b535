// Package bounded loads and evaluates tenants' CUE policies in a child process under a time and
// memory budget, so that no policy can stop the controller that evaluates it.
//
// A CUE evaluation cannot be cancelled and its memory cannot be capped in-process: a
// comprehension over list.Range(0, 1e9) runs one core until it is done and takes what memory it
// needs. So the controller runs each load and each evaluation of a tenant's policy in a worker of
// kind "policy" (internal/worker): the running executable started again, which this package's init
// turns into a worker before main (or a test binary's TestMain) runs. Past the budget the caller
// gets a *BudgetError, and the controller carries on.
package bounded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tidegate/tidegate/internal/worker"
	"github.com/tidegate/tidegate/verdict"
)

// Budget bounds one load or evaluation of a policy.
type Budget = worker.Budget

// BudgetError says a load or an evaluation passed its budget (or, for any other kind of worker,
// that its work did).
type BudgetError = worker.BudgetError

// DefaultBudget is the budget of the controller's flags' defaults: 10 s and 256 MiB. The built-in
// policy decides a 1,000-cluster wave's evidence well within it; four workers at once (the
// controller's concurrent reconciles) stay within the shipped manager's 1 GiB limit with the
// manager's own memory.
var DefaultBudget = Budget{Time: 10 * time.Second, Memory: 256 << 20}

// kind is the policy worker's.
var kind = &worker.Kind{
	Name:        "policy",
	Flags:       "--policy-time-budget, --policy-memory-budget",
	Advice:      "make the policy cheaper, e.g. without comprehensions over large ranges",
	MaxRequest:  2*verdict.MaxEvidenceBytes + 2*verdict.MaxPolicyBytes,
	MaxResponse: 4 << 20,
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
	Decision *verdict.Decision `json:"decision,omitempty"`
	// Problems are a *verdict.PolicyError's, with its Digest.
	Problems []string `json:"problems,omitempty"`
	Digest   string   `json:"digest,omitempty"`
	// Error is any other error.
	Error string `json:"error,omitempty"`
}

// Load checks, in a worker, that files load as a policy (verdict.LoadPolicy) within the budget. A
// policy that does not load is a *verdict.PolicyError, as LoadPolicy returns it; one that passes
// the budget a *BudgetError. Loading it in-process afterwards does the same work, now known to be
// bounded.
func (e *Evaluator) Load(ctx context.Context, files map[string][]byte) error {
	_, err := e.run(ctx, "loading the policy", request{Files: files})
	return err
}

// Evaluate decides gate under p over evidence in a worker, as verdict.Evaluate does in-process.
func (e *Evaluator) Evaluate(ctx context.Context, p *verdict.Policy, gate string, evidence any) (verdict.Decision, error) {
	raw, err := json.Marshal(evidence)
	if err != nil {
		return verdict.Decision{}, fmt.Errorf("encoding the %s evidence: %w", gate, err)
	}
	res, err := e.run(ctx, "evaluating the "+gate+" gate", request{Files: p.Sources(), Gate: gate, Evidence: raw})
	if err != nil {
		return verdict.Decision{}, err
	}
	if res.Decision == nil {
		return verdict.Decision{}, fmt.Errorf("evaluating the %s gate: the policy worker returned no decision", gate)
	}
	return *res.Decision, nil
}

func (e *Evaluator) run(ctx context.Context, op string, req request) (*response, error) {
	var res response
	send := func(w io.Writer) error { return json.NewEncoder(w).Encode(req) }
	if err := kind.Run(ctx, e.Executable, op, e.Budget, send, &res); err != nil {
		return nil, err
	}
	switch {
	case len(res.Problems) > 0:
		return nil, &verdict.PolicyError{Digest: res.Digest, Problems: res.Problems}
	case res.Error != "":
		return nil, fmt.Errorf("%s: %s", op, res.Error)
	}
	return &res, nil
}

func init() {
	kind.Serve(serve)
}

// serve is a worker: one request from r, one response to w.
func serve(r io.Reader, w io.Writer) error {
	var req request
	if err := json.NewDecoder(r).Decode(&req); err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	return json.NewEncoder(w).Encode(answer(req))
}

func answer(req request) response {
	p, err := verdict.LoadPolicy(req.Files)
	var perr *verdict.PolicyError
	switch {
	case errors.As(err, &perr):
		return response{Problems: perr.Problems, Digest: perr.Digest}
	case err != nil:
		return response{Error: err.Error()}
	case req.Gate == "":
		return response{}
	}
	d, err := verdict.Evaluate(p, req.Gate, req.Evidence)
	switch {
	case errors.As(err, &perr):
		return response{Problems: perr.Problems, Digest: perr.Digest}
	case err != nil:
		return response{Error: err.Error()}
	}
	return response{Decision: &d}
}
