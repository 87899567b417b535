package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

// excuse takes the clusters names out of wave wv, which goes on without them: its deploySafe,
// recorded in receipt, could not observe them for the policy's inconclusiveAfter and the policy
// excuses them (InconclusiveUntil). They are never switched by the wave and are not counted in it;
// a catch-up wave brings them to the known-good once the rollout completes and they answer.
func excuse(wv *v1alpha1.WaveStatus, names []string, receipt string) {
	if len(names) == 0 {
		return
	}
	wv.Clusters = slices.DeleteFunc(wv.Clusters, func(c string) bool { return slices.Contains(names, c) })
	for _, c := range names {
		if !slices.ContainsFunc(wv.Excused, func(e v1alpha1.HeldBackCluster) bool { return e.Cluster == c }) {
			wv.Excused = append(wv.Excused, v1alpha1.HeldBackCluster{Cluster: c,
				Reason: "its preflight could not observe it for the policy's inconclusiveAfter; excused by receipt " + receipt})
		}
	}
}

// maxHeldBackReason bounds a held-back member's reason in status; the receipt has the whole story.
const maxHeldBackReason = 256

// heldBackBy lists the members of wave wv whose preflight in deploySafe's evidence ev failed.
func heldBackBy(wv *v1alpha1.WaveStatus, ev any) []v1alpha1.HeldBackCluster {
	ds, ok := deploySafeOf(ev)
	if !ok {
		return nil
	}
	var out []v1alpha1.HeldBackCluster
	for _, c := range ds.Preflight.Clusters {
		if c.Failed() && slices.Contains(wv.Clusters, c.Name) {
			reason := c.Problem()
			if len(reason) > maxHeldBackReason {
				reason = reason[:maxHeldBackReason-3] + "..."
			}
			out = append(out, v1alpha1.HeldBackCluster{Cluster: c.Name, Reason: reason})
		}
	}
	return out
}

// GateDecision is a gate's outcome with what it was based on.
type GateDecision struct {
	// Result is v1alpha1.ResultPass, ResultFail or ResultInconclusive.
	Result string
	// Unobserved names, when Inconclusive, the targets whose evidence could not be collected
	// (verdict.WholeGate for evidence about no one Target).
	Unobserved []string
	// Reasons explain the result; sorted and de-duplicated by the engine.
	Reasons []string
	// Limits say what the evidence does not establish.
	Limits []string
	// Evidence is the evidence document the decision was made over (JSON-encodable).
	Evidence any
	// PolicyDigest identifies the policy that decided.
	PolicyDigest string
}

// InconclusiveUntil decides an Inconclusive decision once the gate has been Inconclusive (prev, its
// latest recorded outcome on the wave) for longer than the policy's settings.inconclusiveAfter, as
// its settings.onInconclusive says: Fail, or Excuse. Excuse applies to deploySafe only, where the
// clusters it could not observe have not been switched, and only when each thing it could not
// observe is a named cluster: it passes the gate on what was observed (Inconclusive means that
// passes), and the wave goes on without them (excusedBy, applyGates). Anything else fails.
func InconclusiveUntil(gate string, d GateDecision, prev *v1alpha1.GateOutcome, s verdict.Settings, now time.Time) GateDecision {
	if d.Result != v1alpha1.ResultInconclusive || prev == nil || prev.Result != v1alpha1.ResultInconclusive || prev.InconclusiveSince == nil {
		return d
	}
	after := s.InconclusiveAfter
	if after <= 0 || now.Sub(prev.InconclusiveSince.Time) < after {
		return d
	}
	since := prev.InconclusiveSince.UTC().Format(time.RFC3339)
	if s.OnInconclusive == verdict.OnInconclusiveExcuse && gate == v1alpha1.GateDeploySafe && len(d.Unobserved) > 0 &&
		!slices.Contains(d.Unobserved, verdict.WholeGate) {
		d.Result = v1alpha1.ResultPass
		d.Reasons = append([]string{fmt.Sprintf("%s since %s, longer than the policy's settings.inconclusiveAfter of %s; settings.onInconclusive is Excuse: the wave goes on without %s, not switched: %s",
			excusedReason, since, after, Plural(len(d.Unobserved), "cluster", "clusters"), FirstNames(d.Unobserved, 10))}, d.Reasons...)
		return d
	}
	d.Result = v1alpha1.ResultFail
	d.Reasons = append([]string{fmt.Sprintf("inconclusive since %s, longer than the policy's settings.inconclusiveAfter of %s: what could not be observed fails the gate",
		since, after)}, d.Reasons...)
	return d
}

// excusedReason opens the reason of a deploySafe decision that excused the clusters it could not
// observe (InconclusiveUntil): a receipt taken up after a restart is read the same way (excusedBy).
const excusedReason = "excused: inconclusive"

// excusedBy lists the members of wave wv that deploySafe decision d excused: when it passed with
// the excuse (excusedReason), the targets of the wave its evidence could not observe. It reads only
// the decision and its evidence, so a decision taken up from its receipt excuses the same clusters.
func excusedBy(wv *v1alpha1.WaveStatus, d GateDecision) []string {
	if d.Result != v1alpha1.ResultPass || !slices.ContainsFunc(d.Reasons, func(r string) bool { return strings.HasPrefix(r, excusedReason) }) {
		return nil
	}
	ds, ok := deploySafeOf(d.Evidence)
	if !ok {
		return nil
	}
	var out []string
	for _, u := range ds.Unobserved {
		if u.Name != "" && slices.Contains(wv.Clusters, u.Name) && !slices.Contains(out, u.Name) {
			out = append(out, u.Name)
		}
	}
	slices.Sort(out)
	return out
}

// maxUnobserved bounds GateOutcome.unobserved; the receipt names them all.
const maxUnobserved = 20

// CapUnobserved is the unobserved targets as status keeps them: the first maxUnobserved, then how
// many more.
func CapUnobserved(names []string) []string {
	if len(names) <= maxUnobserved {
		return names
	}
	return append(slices.Clone(names[:maxUnobserved]), fmt.Sprintf("and %d more", len(names)-maxUnobserved))
}

// deploySafeOf is deploySafe's evidence, when ev is it.
func deploySafeOf(ev any) (verdict.DeploySafeEvidence, bool) {
	switch e := ev.(type) {
	case verdict.DeploySafeEvidence:
		return e, true
	case *verdict.DeploySafeEvidence:
		if e != nil {
			return *e, true
		}
	}
	return verdict.DeploySafeEvidence{}, false
}
