package verdict

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/errors"
	cuejson "cuelang.org/go/encoding/json"
)

// MaxEvidenceBytes bounds a gate's evidence, encoded as JSON. Collectors give CUE compact per-wave
// summaries; a document beyond this is a collector bug, and evaluating it would cost memory and
// time the controller cannot spare at 1,000 clusters.
const MaxEvidenceBytes = 1 << 20

// ErrEvidenceTooLarge is returned (wrapped) for evidence beyond MaxEvidenceBytes.
var ErrEvidenceTooLarge = fmt.Errorf("evidence larger than %d bytes of JSON", MaxEvidenceBytes)

// Decision is a gate's outcome under a policy.
type Decision struct {
	// Gate decided.
	Gate string `json:"gate"`
	// Pass is true when the evidence satisfies the gate's evidence schema and the policy's
	// constraints, concretely.
	Pass bool `json:"pass"`
	// Inconclusive is true when the gate did not pass, the evidence lists targets it could not
	// observe (#Evidence.unobserved), and what was observed does not fail the gate: the same
	// evidence with what could not be observed of them assumed healthy passes, or the evidence
	// misses something about no one target (an entry without a name: a fetch that failed).
	// Observed disruption is a failure.
	Inconclusive bool `json:"inconclusive,omitempty"`
	// Unobserved names the targets the evidence could not observe when Inconclusive, sorted; "*"
	// stands for evidence about no one target.
	Unobserved []string `json:"unobserved,omitempty"`
	// Reasons say why the gate failed: CUE errors with their paths ("noDisruption.clusters.3.
	// minAvailableRatio: invalid value 0.5 (out of bound >=0.9) (clusters.3: member-4)"), sorted
	// and de-duplicated. Empty when Pass is true.
	Reasons []string `json:"reasons,omitempty"`
	// Limits are the evidence's own limits: what it does not establish.
	Limits []string `json:"limits,omitempty"`
	// PolicyDigest identifies the policy that decided.
	PolicyDigest string `json:"policyDigest"`
}

// Evaluate decides one gate: it unifies the evidence with the gate's evidence schema and the
// policy's field for the gate, validates the result concretely, and passes the gate when
// there is no error.
//
// evidence is a JSON document ([]byte or json.RawMessage) or any value encoding/json encodes
// (one of the evidence types of this package, usually). Nil, or JSON null, is missing evidence:
// the gate fails. An error means no decision could be made and the gate must count as failed:
// an unknown gate, an invalid or non-concrete policy (*PolicyError), evidence that cannot be
// encoded or is larger than MaxEvidenceBytes, or a panic inside CUE.
func Evaluate(p *Policy, gate string, evidence any) (d Decision, err error) {
	defer recoverInto(&err, "evaluating the "+gate+" gate")
	if p == nil {
		return Decision{}, fmt.Errorf("evaluating the %s gate: no policy", gate)
	}
	if _, ok := schemaOf[gate]; !ok {
		return Decision{}, fmt.Errorf("evaluating gate %q: not a gate; the gates are %v", gate, Gates)
	}
	d = Decision{Gate: gate, PolicyDigest: p.digest}
	data, err := encodeEvidence(gate, evidence)
	if err != nil {
		return d, err
	}
	if data == nil {
		d.Reasons = []string{gate + ": no evidence was collected; a gate without evidence fails"}
		return d, nil
	}
	if d, err = p.evaluate(gate, data); err != nil || d.Pass {
		return d, err
	}
	return p.classify(gate, data, d)
}

// classify tells an inconclusive decision from a failed one: a failed gate whose evidence lists
// unobserved targets is Inconclusive when it passes with what could not be observed of them assumed
// healthy (assumeObserved: what was observed is fine, the rest is not known), or when something
// about no one target could not be observed.
func (p *Policy) classify(gate string, data []byte, d Decision) (Decision, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return d, nil
	}
	unobserved, names, whole := unobservedIn(doc)
	if len(unobserved) == 0 {
		return d, nil
	}
	inconclusive := whole
	if !whole {
		observed, err := json.Marshal(assumeObserved(doc, names))
		if err != nil {
			return d, nil
		}
		od, err := p.evaluate(gate, observed)
		if err != nil {
			return d, err
		}
		inconclusive = od.Pass
	}
	if !inconclusive {
		return d, nil
	}
	d.Inconclusive = true
	d.Unobserved = unobserved
	d.Reasons = sortUnique(append(d.Reasons, unobservedReasons(gate, doc)...))
	return d, nil
}

// evaluate decides gate on the evidence data, JSON.
func (p *Policy) evaluate(gate string, data []byte) (d Decision, err error) {
	d = Decision{Gate: gate, PolicyDigest: p.digest}
	expr, err := cuejson.Extract(gate+".json", data)
	if err != nil {
		return d, fmt.Errorf("evaluating the %s gate: the evidence is not JSON: %w", gate, err)
	}
	ctx := newContext()
	at := cue.MakePath(cue.Str(gate))
	bind := &binding{gate: gate, evidence: expr}
	root, err := p.build(ctx, bind)
	if err != nil {
		return d, p.policyError(err)
	}
	full := root.LookupPath(at)
	if l := full.LookupPath(cue.MakePath(cue.Str("limits"))); l.Exists() {
		// Limits that do not decode are caught by the schema below; the decision keeps what it can.
		_ = l.Decode(&d.Limits)
	}
	verr := full.Validate(cue.Concrete(true))
	if verr == nil {
		verr = root.Err()
	}
	if verr == nil && bind.declared {
		d.Pass = true
		return d, nil
	}

	// The gate failed, or something did, or the gate's field is not plainly there. The policy
	// alone tells whose fault it is.
	policy, err := p.compile(ctx)
	if err != nil {
		return d, p.policyError(err)
	}
	if _, err := gateField(policy, gate); err != nil {
		return d, &PolicyError{Digest: p.digest, Problems: []string{err.Error()}}
	}
	if err := root.LookupPath(cue.MakePath(cue.Str(settingsField))).Validate(cue.Concrete(true)); err != nil {
		return d, p.policyError(err)
	}
	if verr == nil {
		d.Pass = true
		return d, nil
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	_ = dec.Decode(&doc) // data is JSON: Extract parsed it
	d.Reasons = reasons(verr, doc)
	// The evidence against its schema alone names what is missing where the policy's view of
	// it only says "non-concrete value in operand" at the comprehension that needed it. Only
	// worth a second evaluation when something was left open.
	plain := full.Validate()
	open := leftOpen(verr, plain)
	if expr, err := cuejson.Extract(gate+".json", data); err == nil && len(open) > 0 {
		ev := ctx.BuildExpr(expr)
		contract := ctx.CompileString("{}").FillPath(at, policy.LookupPath(cue.ParsePath(schemaOf[gate]))).FillPath(at, ev).LookupPath(at)
		if cerr := contract.Validate(cue.Concrete(true)); cerr != nil {
			d.Reasons = sortUnique(append(d.Reasons, reasons(cerr, doc)...))
		}
	}
	if policyLeftOpen(open, doc) {
		return d, &PolicyError{Digest: p.digest, Problems: append([]string{
			gate + ": the policy is not concrete: it leaves open a value that the evidence cannot settle"}, d.Reasons...)}
	}
	return d, nil
}

// encodeEvidence returns the evidence as JSON, nil when it is missing.
func encodeEvidence(gate string, evidence any) ([]byte, error) {
	var data []byte
	switch e := evidence.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		data = e
	case []byte:
		data = e
	default:
		var err error
		if data, err = json.Marshal(evidence); err != nil {
			return nil, fmt.Errorf("evaluating the %s gate: encoding the evidence: %w", gate, err)
		}
	}
	if t := bytes.TrimSpace(data); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, nil
	}
	if len(data) > MaxEvidenceBytes {
		return nil, fmt.Errorf("evaluating the %s gate: the evidence is %d bytes: %w; collect per-wave summaries, not raw dumps", gate, len(data), ErrEvidenceTooLarge)
	}
	return data, nil
}

// leftOpen returns the errors that concrete validation finds and plain validation does not:
// values left open.
func leftOpen(concrete, plain error) []errors.Error {
	conflicts := map[string]bool{}
	for _, e := range errors.Errors(plain) {
		conflicts[strings.Join(e.Path(), ".")+": "+message(e)] = true
	}
	var open []errors.Error
	for _, e := range errors.Errors(concrete) {
		if !conflicts[strings.Join(e.Path(), ".")+": "+message(e)] {
			open = append(open, e)
		}
	}
	return open
}

// policyLeftOpen tells a policy that is not concrete from evidence that is incomplete: a value
// left open is the policy's fault when the evidence has a concrete scalar where the error is (a
// bound against an open value, say). An open value where the evidence has nothing is missing
// evidence.
func policyLeftOpen(open []errors.Error, doc any) bool {
	for _, e := range open {
		p := e.Path()
		if len(p) < 2 {
			continue
		}
		switch lookupJSON(doc, p[1:]).(type) {
		case string, bool, json.Number:
			return true
		}
	}
	return false
}

// newContext is the one place a cue.Context is made: one per evaluation, dropped afterwards, so
// that memory does not grow with the number of evaluations.
func newContext() *cue.Context { return cuecontext.New() }

// recoverInto turns a panic (CUE has had evaluator panics on odd input) into an error, so that a
// gate fails closed instead of taking the controller down.
func recoverInto(err *error, what string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: recovered from a panic: %v", what, r)
	}
}
