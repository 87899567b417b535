package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

// ReceiptSelector names a receipt: by Name, or as the decisive receipt of Rollout's Gate in Wave
// (DecisiveReceipt).
type ReceiptSelector struct {
	Name    string `json:"name,omitempty"`
	Rollout string `json:"rollout,omitempty"`
	Gate    string `json:"gate,omitempty"`
	Wave    string `json:"wave,omitempty"`
}

// Explanation is a gate decision taken apart: what was decided, each reason with the evidence it
// refers to, the policy and, where it is the built-in one, the settings the reasons' constraints
// come from, and what would let the gate pass.
type Explanation struct {
	Receipt      Ref         `json:"receipt"`
	Rollout      string      `json:"rollout"`
	Gate         string      `json:"gate"`
	Wave         string      `json:"wave,omitempty"`
	Result       string      `json:"result"`
	Candidate    Revision    `json:"candidate"`
	KnownGood    *Revision   `json:"knownGood,omitempty"`
	Targets      []string    `json:"targets,omitempty"`
	EvaluatedAt  metav1.Time `json:"evaluatedAt"`
	PolicyDigest string      `json:"policyDigest"`
	// Policy says which policy the digest is: "built-in", or where the rollout takes it from.
	Policy    string              `json:"policy"`
	Reasons   []ExplainedReason   `json:"reasons"`
	Limits    []string            `json:"limits,omitempty"`
	Approvals []v1alpha1.Approval `json:"approvals,omitempty"`
	// Evidence says what of the evidence could be read when not all of it: a receipt of an older
	// version that keeps only its digest.
	Evidence string `json:"evidence,omitempty"`
	// Settings are the built-in policy's settings when it decided; a policy from a source is not
	// fetched, so they are then left out.
	Settings *verdict.Settings `json:"settings,omitempty"`
	// Current is false when the rollout has moved on to another candidate (or is gone): the
	// receipt is history, and ToPass says nothing about the rollout as it is now.
	Current bool     `json:"current"`
	ToPass  []Remedy `json:"toPass,omitempty"`
}

// ExplainedReason is one reason of a receipt with what it refers to.
type ExplainedReason struct {
	Reason string `json:"reason"`
	// Path is the CUE path of the constraint that failed, below the gate; empty for a reason
	// about the gate as a whole.
	Path string `json:"path,omitempty"`
	// Value is the evidence's value at Path as recorded, when the path is in the evidence (a
	// hidden field of the policy, such as _budget, is not).
	Value json.RawMessage `json:"value,omitempty"`
	// About names the list elements along the path ("clusters.0: eu-1").
	About string `json:"about,omitempty"`
	// Setting is the policy setting the constraint compares the value with, and SettingValue
	// its value under the built-in policy.
	Setting      string `json:"setting,omitempty"`
	SettingValue any    `json:"settingValue,omitempty"`
}

// Remedy is one thing that would let the gate pass.
type Remedy struct {
	// Action: approve, retry, reconcile, wait, fix or policy.
	Action  string `json:"action"`
	Message string `json:"message"`
	Command string `json:"command,omitempty"`
}

// settingOf is the setting of the built-in policy each evidence field's constraint refers to,
// by the field's name.
var settingOf = map[string]string{
	"minAvailableRatio":  "settings.tolerances.minAvailableRatio",
	"unavailableSeconds": "settings.tolerances.maxUnavailableSeconds",
	"observedSamples":    "settings.tolerances.minSampleCoverage",
	"seconds":            "settings.tolerances.maxRehearsalSeconds",
	"done":               "settings.rehearsal",
}

func settingValue(s verdict.Settings, setting string) any {
	switch setting {
	case "settings.tolerances.minAvailableRatio":
		return s.Tolerances.MinAvailableRatio
	case "settings.tolerances.maxUnavailableSeconds":
		return s.Tolerances.MaxUnavailableSeconds
	case "settings.tolerances.minSampleCoverage":
		return s.Tolerances.MinSampleCoverage
	case "settings.tolerances.maxRehearsalSeconds":
		return s.Tolerances.MaxRehearsalSeconds
	case "settings.rehearsal":
		return s.Rehearsal
	}
	return nil
}

// GetReceipt reads the receipt sel names in ns: the one named, or the decisive one of a gate.
func GetReceipt(ctx context.Context, c client.Client, ns string, sel ReceiptSelector) (*v1alpha1.GateReceipt, error) {
	switch {
	case sel.Name != "" && (sel.Rollout != "" || sel.Gate != "" || sel.Wave != ""):
		return nil, Errorf(CodeInvalid, nil, "name the receipt, or give its rollout, gate and wave, not both")
	case sel.Name != "":
		rc := &v1alpha1.GateReceipt{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: sel.Name}, rc); err != nil {
			return nil, AsError(err, receiptRef(ns, sel.Name))
		}
		return rc, nil
	case sel.Rollout == "" || sel.Gate == "":
		return nil, Errorf(CodeInvalid, nil, "name the receipt, or give the rollout and the gate (%s), and the wave unless it is the latest one", strings.Join(verdict.Gates, ", "))
	case !slices.Contains(verdict.Gates, sel.Gate):
		return nil, Errorf(CodeInvalid, nil, "gate %q: the gates are %s", sel.Gate, strings.Join(verdict.Gates, ", "))
	}
	return DecisiveReceipt(ctx, c, ns, sel.Rollout, sel.Gate, sel.Wave)
}

// DecisiveReceipt is the receipt that decided gate for wave of rollout ns/name (any wave when
// wave is empty): the one the rollout's status records as the gate's outcome, else, for a rollout
// whose status no longer records it (a new candidate, a deleted rollout), the latest receipt of
// that gate and wave by evaluatedAt.
func DecisiveReceipt(ctx context.Context, c client.Client, ns, rollout, gate, wave string) (*v1alpha1.GateReceipt, error) {
	fr := &v1alpha1.FleetRollout{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: rollout}, fr); err != nil && !apierrors.IsNotFound(err) {
		return nil, AsError(err, RolloutRef(ns, rollout))
	}
	// The last wave that recorded the gate: a wave decided later is the more recent decision.
	for i := len(fr.Status.Waves) - 1; i >= 0; i-- {
		w := fr.Status.Waves[i]
		if wave != "" && w.Name != wave {
			continue
		}
		if rc, err := recordedReceipt(ctx, c, ns, w, gate); rc != nil || err != nil {
			return rc, err
		}
	}
	var list v1alpha1.GateReceiptList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, AsError(err, Ref{Kind: "gatereceipts", Namespace: ns})
	}
	var latest *v1alpha1.GateReceipt
	for i := range list.Items {
		rc := &list.Items[i]
		if rc.Spec.Rollout != rollout || rc.Spec.Gate != gate || (wave != "" && rc.Spec.Wave != wave) {
			continue
		}
		if latest == nil || rc.Spec.EvaluatedAt.After(latest.Spec.EvaluatedAt.Time) ||
			(rc.Spec.EvaluatedAt.Equal(&latest.Spec.EvaluatedAt) && rc.Name > latest.Name) {
			latest = rc
		}
	}
	if latest == nil {
		where := "any wave"
		if wave != "" {
			where = "wave " + wave
		}
		ref := RolloutRef(ns, rollout)
		return nil, Errorf(CodeNotFound, &ref, "no %s receipt of fleetrollout %s/%s for %s", gate, ns, rollout, where)
	}
	return latest, nil
}

// recordedReceipt is the receipt wave w records for gate; nil when it records none or the receipt
// was pruned since (the latest of the rest is then the one to explain).
func recordedReceipt(ctx context.Context, c client.Client, ns string, w v1alpha1.WaveStatus, gate string) (*v1alpha1.GateReceipt, error) {
	for _, g := range w.Gates {
		if g.Gate != gate || g.Receipt == "" {
			continue
		}
		rc := &v1alpha1.GateReceipt{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: g.Receipt}, rc)
		switch {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, AsError(err, receiptRef(ns, g.Receipt))
		}
		return rc, nil
	}
	return nil, nil
}

func receiptRef(ns, name string) Ref { return Ref{Kind: "gatereceipt", Namespace: ns, Name: name} }

// ReceiptEvidence reads the receipt's evidence from where it keeps it (spec.evidence,
// spec.evidenceGzip, or the ConfigMaps of spec.evidenceParts, each checked against its digest).
// It is nil for a receipt that keeps only the digest of its evidence; evidence that is kept but
// cannot be read is an error, never an empty document.
func ReceiptEvidence(ctx context.Context, c client.Client, rc *v1alpha1.GateReceipt) ([]byte, error) {
	raw, unreadable, err := recordedEvidence(ctx, c, rc)
	switch {
	case err != nil:
		return nil, err
	case strings.HasPrefix(unreadable, digestOnly):
		return nil, nil // what the receipt says is all there is: its decision, not its evidence
	case unreadable != "":
		ref := receiptRef(rc.Namespace, rc.Name)
		return nil, Errorf(CodeUnmet, &ref, "gatereceipt %s/%s: %s (tidegate receipts verify says what is wrong with it)", rc.Namespace, rc.Name, unreadable)
	}
	return raw, nil
}

// Explain takes apart the decision of the receipt sel names in ns (GetReceipt).
func Explain(ctx context.Context, c client.Client, ns string, sel ReceiptSelector) (Explanation, error) {
	rc, err := GetReceipt(ctx, c, ns, sel)
	if err != nil {
		return Explanation{}, err
	}
	raw, err := ReceiptEvidence(ctx, c, rc)
	if err != nil {
		return Explanation{}, err
	}
	var doc any
	if raw != nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber() // values as recorded: 0.5 stays 0.5, a large integer stays exact
		if err := dec.Decode(&doc); err != nil {
			ref := receiptRef(rc.Namespace, rc.Name)
			return Explanation{}, Errorf(CodeUnmet, &ref, "the evidence of gatereceipt %s/%s is not JSON: %w", rc.Namespace, rc.Name, err)
		}
	}
	fr := &v1alpha1.FleetRollout{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: rc.Spec.Rollout}, fr); apierrors.IsNotFound(err) {
		fr = nil
	} else if err != nil {
		return Explanation{}, AsError(err, RolloutRef(ns, rc.Spec.Rollout))
	}
	return explain(rc, doc, raw != nil, fr), nil
}

// explain is Explain over the receipt's decoded evidence (hasEvidence false: it keeps only its
// digest) and its rollout as it is now (nil when it is gone).
func explain(rc *v1alpha1.GateReceipt, doc any, hasEvidence bool, fr *v1alpha1.FleetRollout) Explanation {
	s := rc.Spec
	e := Explanation{
		Receipt: receiptRef(rc.Namespace, rc.Name), Rollout: s.Rollout, Gate: s.Gate, Wave: s.Wave, Result: s.Result,
		Candidate: Revision{Revision: s.Candidate.Revision, Digest: s.Candidate.Digest}, KnownGood: revisionOf(s.KnownGood),
		Targets: s.Targets, EvaluatedAt: s.EvaluatedAt, PolicyDigest: s.PolicyDigest,
		Reasons: []ExplainedReason{}, Limits: s.Limits, Approvals: s.Approvals,
	}
	builtin := verdict.DefaultPolicy()
	switch {
	case s.PolicyDigest == builtin.Digest():
		e.Policy = "built-in"
		if st, err := builtin.Settings(); err == nil {
			e.Settings = &st
		}
	case fr != nil && fr.Spec.Policy != nil:
		e.Policy = fmt.Sprintf("%s %s/%s path %s (the rollout's spec.policy; the receipt records only its digest)",
			fr.Spec.Policy.SourceRef.Kind, fr.Namespace, fr.Spec.Policy.SourceRef.Name, fr.Spec.Policy.Path)
	case strings.HasPrefix(s.PolicyDigest, "builtin:"):
		e.Policy = "built-in, of another version of tidegate"
	default:
		e.Policy = "a policy from a Flux source; the receipt records only its digest"
	}
	if !hasEvidence {
		e.Evidence = "the receipt keeps only the digest of its evidence (" + s.EvidenceDigest + "): the values the reasons refer to cannot be shown"
	}
	for _, r := range s.Reasons {
		er := ExplainedReason{Reason: r}
		path := verdict.ReasonPath(s.Gate, r)
		if len(path) > 0 {
			er.Path = strings.Join(path, ".")
			if hasEvidence {
				v, found, about := verdict.EvidenceAt(doc, path)
				er.About = about
				if found {
					er.Value, _ = json.Marshal(v)
				}
			}
			if setting, ok := settingOf[path[len(path)-1]]; ok {
				er.Setting = setting
				if e.Settings != nil {
					er.SettingValue = settingValue(*e.Settings, setting)
				}
			}
		}
		e.Reasons = append(e.Reasons, er)
	}
	e.Current = fr != nil && fr.Status.Candidate != nil && fr.Status.Candidate.Revision == s.Candidate.Revision
	if e.Current && s.Result != v1alpha1.ResultPass {
		e.ToPass = remedies(rc, fr, e.Settings, needsApproval(e.Reasons))
	}
	return e
}

// needsApproval tells whether a reason is about a finding that an approval would cover: the
// evidence's approved field of a rollbackSafe finding (false until spec.approvals holds an
// approval of the candidate with irreversible: true), whatever the policy's message says.
func needsApproval(reasons []ExplainedReason) bool {
	return slices.ContainsFunc(reasons, func(r ExplainedReason) bool {
		return r.Path == "approved" || strings.HasSuffix(r.Path, ".approved")
	})
}

// remedies says what would let the receipt's gate pass, for its rollout as it is now: the approval
// a reason asks for, a retry of a rejected candidate, waiting for an inconclusive gate, and what
// to change for a failed one.
func remedies(rc *v1alpha1.GateReceipt, fr *v1alpha1.FleetRollout, settings *verdict.Settings, irreversible bool) []Remedy {
	s := rc.Spec
	base := fmt.Sprintf("tidegate -n %s ", fr.Namespace)
	var out []Remedy
	if irreversible {
		out = append(out, Remedy{Action: "approve",
			Message: "the changes a rollback could not undo pass once someone approves them for the candidate revision (spec.approvals with irreversible: true)",
			Command: fmt.Sprintf("%sapprove %s --revision %s --irreversible --by NAME --reason REASON", base, fr.Name, s.Candidate.Revision)})
	}
	if w := fr.Status.WaitingFor; w != nil && w.Reason == v1alpha1.WaitingForApproval {
		out = append(out, Remedy{Action: "approve", Message: "the rollout also waits for an approval: " + OneLine(w.Message),
			Command: fmt.Sprintf("%sapprove %s --revision %s --wave %s --by NAME", base, fr.Name, s.Candidate.Revision, w.Wave)})
	}
	rejected := slices.ContainsFunc(fr.Status.Rejected, func(r v1alpha1.RejectedRevision) bool { return r.Revision == s.Candidate.Revision })
	switch {
	case s.Result == v1alpha1.ResultInconclusive:
		after := "settings.inconclusiveAfter"
		if settings != nil {
			after = fmt.Sprintf("settings.inconclusiveAfter (%s)", settings.InconclusiveAfter)
		}
		out = append(out, Remedy{Action: "wait",
			Message: "the evidence was incomplete: the gate is decided again as evidence arrives (a member answers again, the artifact is served); past " + after + " it counts as Fail"},
			Remedy{Action: "reconcile", Message: "decide again now", Command: base + "reconcile " + fr.Name})
	case rejected:
		out = append(out, Remedy{Action: "retry",
			Message: "the candidate was rejected after this failure and will not go again by itself: once the cause is fixed, a retry lets it",
			Command: base + "retry " + fr.Name})
	case !irreversible:
		out = append(out, Remedy{Action: "retry",
			Message: "when the cause lies outside the package (a cluster, a dependency) and is fixed, decide again with the same candidate",
			Command: base + "retry " + fr.Name})
	}
	if s.Result == v1alpha1.ResultFail && !irreversible {
		out = append(out, Remedy{Action: "fix",
			Message: "when the cause is in the package, fix what the reasons name and commit it: the new revision is a new candidate, decided afresh"})
	}
	out = append(out, Remedy{Action: "policy",
		Message: "when the policy is what should change, try the edit on this receipt's evidence before committing it",
		Command: fmt.Sprintf("%spreview policy --receipt %s --policy DIR", base, rc.Name)})
	return out
}
