package ops

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Change is what a Mutation did: Message says it (or why nothing changed), Changed false means
// there is nothing to write, Notes are said beside the message (an abbreviated revision expanded)
// and Warning says why the controller may not act on it.
type Change struct {
	Message string   `json:"message"`
	Changed bool     `json:"changed"`
	Notes   []string `json:"notes,omitempty"`
	Warning string   `json:"warning,omitempty"`
}

// Mutation changes a rollout's spec or annotations in place. It is called again with a fresh copy
// when the write meets a conflict, so it keeps no state of its own.
type Mutation func(fr *v1alpha1.FleetRollout) (Change, error)

// Hold sets spec.hold with reason: no new wave starts and no pre-wave gate is decided.
func Hold(reason string) Mutation {
	return func(fr *v1alpha1.FleetRollout) (Change, error) {
		if strings.TrimSpace(reason) == "" {
			return Change{}, Errorf(CodeInvalid, refOf(fr), "a reason is required: it tells whoever resumes the rollout why it was held")
		}
		switch {
		case fr.Spec.Hold != nil && fr.Spec.Hold.Reason == reason:
			return Change{Message: fmt.Sprintf("spec.hold already set (reason: %s); nothing changed", reason)}, nil
		case fr.Spec.Hold != nil:
			old := fr.Spec.Hold.Reason
			fr.Spec.Hold.Reason = reason
			return Change{Message: fmt.Sprintf("spec.hold set (reason: %s; was: %s)", reason, old), Changed: true}, nil
		}
		fr.Spec.Hold = &v1alpha1.Hold{Reason: reason}
		return Change{Message: fmt.Sprintf("spec.hold set (reason: %s)", reason), Changed: true}, nil
	}
}

// Resume clears spec.hold and spec.suspend, whichever are set.
func Resume() Mutation {
	return func(fr *v1alpha1.FleetRollout) (Change, error) {
		var cleared []string
		if fr.Spec.Hold != nil {
			cleared = append(cleared, fmt.Sprintf("spec.hold cleared (was: %s)", fr.Spec.Hold.Reason))
			fr.Spec.Hold = nil
		}
		if fr.Spec.Suspend {
			cleared = append(cleared, "spec.suspend cleared")
			fr.Spec.Suspend = false
		}
		if len(cleared) == 0 {
			return Change{Message: "neither spec.hold nor spec.suspend is set; nothing changed" + heldWithoutHold(fr)}, nil
		}
		return Change{Message: strings.Join(cleared, ", "), Changed: true}, nil
	}
}

// Suspend sets spec.suspend: tidegate writes nothing at all for the rollout.
func Suspend() Mutation {
	return func(fr *v1alpha1.FleetRollout) (Change, error) {
		if fr.Spec.Suspend {
			return Change{Message: "spec.suspend already true; nothing changed"}, nil
		}
		fr.Spec.Suspend = true
		return Change{Message: "spec.suspend set to true", Changed: true}, nil
	}
}

// Approve appends a to spec.approvals. a.Revision is required, as status.candidate.revision shows
// it; the first 7 or more characters of the candidate's commit or digest are expanded to it.
func Approve(a v1alpha1.Approval) Mutation {
	return func(fr *v1alpha1.FleetRollout) (Change, error) {
		var ch Change
		cand := fr.Status.Candidate
		if a.Revision == "" {
			hint := fmt.Sprintf("%s has no candidate yet", refOf(fr))
			if cand != nil {
				hint = fmt.Sprintf("the candidate of %s is %s", refOf(fr), cand.Revision)
			}
			return ch, Errorf(CodeInvalid, refOf(fr), "--revision is required, as status.candidate.revision shows it (%s)", hint)
		}
		entry := a
		if cand != nil && entry.Revision != cand.Revision {
			if expandsTo(entry.Revision, cand) {
				ch.Notes = append(ch.Notes, fmt.Sprintf("%s expanded to the candidate %s", entry.Revision, cand.Revision))
				entry.Revision = cand.Revision
			} else {
				ch.Notes = append(ch.Notes, fmt.Sprintf("warning: %s is not the candidate (%s): the approval applies only once it is", entry.Revision, cand.Revision))
			}
		}
		if cand != nil && entry.Revision == cand.Revision && entry.BuildHash == "" && fr.NeedsBuildApproval(cand) {
			// A build edit of a revision that rolled out: an approval of the revision alone does
			// not approve it.
			entry.BuildHash = cand.BuildHash
			ch.Notes = append(ch.Notes, fmt.Sprintf("the candidate is %s with build %s (a build edit): the approval names it", cand.Revision, cand.BuildHash))
		}
		if entry.Wave != "" {
			waves := []string{"all"}
			if len(fr.Spec.Waves) > 0 {
				waves = nil
				for _, w := range fr.Spec.Waves {
					waves = append(waves, w.Name)
				}
			}
			if !slices.Contains(waves, entry.Wave) {
				return ch, Errorf(CodeInvalid, refOf(fr), "%s has no wave %q; its waves are %s", refOf(fr), entry.Wave, strings.Join(waves, ", "))
			}
		}
		if slices.ContainsFunc(fr.Spec.Approvals, func(a v1alpha1.Approval) bool { return sameApproval(a, entry) }) {
			ch.Message = "spec.approvals already has " + ApprovalString(entry) + "; nothing changed"
			return ch, nil
		}
		fr.Spec.Approvals = append(fr.Spec.Approvals, entry)
		ch.Message, ch.Changed = "spec.approvals += "+ApprovalString(entry), true
		return ch, nil
	}
}

// Rollback sets spec.rollback.request to a new value (the time now). While a candidate is in
// flight (Progressing or Held), every Kustomization of the rollout goes back to the known-good
// revision's pinned source at once; once the rollout is Completed, the previous known-good of
// status.history is rolled out again through the gates, wave by wave.
func Rollback(now time.Time) Mutation {
	return func(fr *v1alpha1.FleetRollout) (Change, error) {
		v := requestValue(now, fr.Spec.Rollback.Request, fr.Status.LastHandledRollbackRequest)
		fr.Spec.Rollback.Request = v
		ch := Change{Message: "spec.rollback.request set to " + v, Changed: true}
		st := &fr.Status
		switch {
		case st.LastKnownGood == nil:
			ch.Warning = "warning: there is no known-good revision to go back to; the controller will refuse the request"
		case st.Phase == v1alpha1.PhaseCompleted && st.Revert == nil:
			prev := st.PreviousKnownGood()
			if prev == nil {
				ch.Warning = fmt.Sprintf("warning: status.history holds no known-good revision before %s; the controller will refuse the request", st.LastKnownGood.Revision)
				break
			}
			ch.Message += fmt.Sprintf(" (back from %s to the previous known-good %s, through the gates wave by wave)", st.LastKnownGood.Revision, prev.Revision)
		case st.Phase != v1alpha1.PhaseProgressing && st.Phase != v1alpha1.PhaseHeld:
			ch.Warning = fmt.Sprintf("warning: the rollout is %s; a rollback request acts only while it is Progressing, Held or Completed", OrDash(st.Phase))
		default:
			cand := "-"
			if fr.Status.Candidate != nil {
				cand = fr.Status.Candidate.Revision
			}
			ch.Message += fmt.Sprintf(" (back from %s to %s)", cand, fr.Status.LastKnownGood.Revision)
		}
		return ch, nil
	}
}

// Retry sets spec.retry to a new value (the time now): a rolled-back candidate is no longer
// rejected, a rollout held by a failed wave restarts the failed waves.
func Retry(now time.Time) Mutation {
	return func(fr *v1alpha1.FleetRollout) (Change, error) {
		v := requestValue(now, fr.Spec.Retry, fr.Status.LastHandledRetry)
		fr.Spec.Retry = v
		ch := Change{Message: "spec.retry set to " + v, Changed: true}
		switch p := fr.Status.Phase; {
		case p == v1alpha1.PhaseHeld || p == v1alpha1.PhaseRolledBack:
		case p == v1alpha1.PhaseCompleted && len(fr.Status.Rejected) > 0:
			// A rollback of the completed rollout rejected the revision it left: retry lets it go again.
		default:
			ch.Warning = fmt.Sprintf("warning: the rollout is %s; a retry acts only on a Held or RolledBack rollout, or a Completed one that rejected a revision", OrDash(p))
		}
		return ch, nil
	}
}

// RequestReconcile sets the annotation reconcile.fluxcd.io/requestedAt to value, as flux reconcile
// does; the controller records it in status.lastHandledReconcileAt once handled.
func RequestReconcile(value string) Mutation {
	return func(fr *v1alpha1.FleetRollout) (Change, error) {
		if fr.Spec.Suspend {
			return Change{}, Errorf(CodeInvalid, refOf(fr), "%s is suspended: the controller writes nothing for it; resume it first (tidegate resume %s)", refOf(fr), fr.Name)
		}
		if fr.Annotations == nil {
			fr.Annotations = map[string]string{}
		}
		fr.Annotations[meta.ReconcileRequestAnnotation] = value
		return Change{Message: "annotation " + meta.ReconcileRequestAnnotation + " set to " + value, Changed: true}, nil
	}
}

// ApprovalString is an approval as the write messages print it.
func ApprovalString(a v1alpha1.Approval) string {
	parts := []string{"revision: " + a.Revision}
	if a.BuildHash != "" {
		parts = append(parts, "buildHash: "+a.BuildHash)
	}
	if a.Wave != "" {
		parts = append(parts, "wave: "+a.Wave)
	}
	if a.Irreversible {
		parts = append(parts, "irreversible: true")
	}
	if a.By != "" {
		parts = append(parts, "by: "+a.By)
	}
	if a.AuthenticatedAs != "" {
		parts = append(parts, "authenticatedAs: "+a.AuthenticatedAs)
	}
	if a.Reason != "" {
		parts = append(parts, "reason: "+strconv.Quote(a.Reason))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// sameApproval tells whether a and b approve the same thing, the same way, from the same person:
// the same approval given again at another time is not a new one.
func sameApproval(a, b v1alpha1.Approval) bool {
	a.ApprovedAt, b.ApprovedAt = nil, nil
	return a == b
}

// expandsTo tells whether short is the first 7 or more characters of the candidate's commit or
// digest, the digest with or without its sha256: prefix.
func expandsTo(short string, cand *v1alpha1.RevisionStatus) bool {
	short = strings.TrimPrefix(short, "sha256:")
	if len(short) < 7 {
		return false
	}
	for _, s := range []string{cand.Revision, cand.Digest} {
		if s != "" && strings.HasPrefix(s[strings.LastIndex(s, ":")+1:], short) {
			return true
		}
	}
	return false
}

// requestValue is a new value for a request field: the time, unlike the current value and the
// last one the controller handled (or it would not act).
func requestValue(now time.Time, taken ...string) string {
	base := now.UTC().Format(time.RFC3339)
	v := base
	for i := 0; slices.Contains(taken, v); i++ {
		if i == 0 {
			v = now.UTC().Format(time.RFC3339Nano)
		} else {
			v = fmt.Sprintf("%s-%d", base, i)
		}
	}
	return v
}

// heldWithoutHold says, for Resume, why a rollout is Held when spec.hold is not set ("" when it
// is not Held): Held's condition reason tells a failed wave from a wave that could not be judged.
func heldWithoutHold(fr *v1alpha1.FleetRollout) string {
	if fr.Status.Phase != v1alpha1.PhaseHeld {
		return ""
	}
	c := apimeta.FindStatusCondition(fr.Status.Conditions, v1alpha1.HeldCondition)
	switch {
	case c == nil || c.Reason == v1alpha1.GateFailedReason:
		return " (the rollout is Held because a wave failed: see tidegate retry and tidegate rollback)"
	case c.Reason == v1alpha1.InvalidWaveReason:
		return " (the rollout is Held because a wave could not be judged; change what this names: " + OneLine(c.Message) + ")"
	}
	return " (the rollout is Held: " + OneLine(c.Message) + ")"
}

// OneLine keeps a message on one line.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// OrDash is s, or "-" when it is empty.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func refOf(fr *v1alpha1.FleetRollout) *Ref {
	r := RolloutRef(fr.Namespace, fr.Name)
	return &r
}
