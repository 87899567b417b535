package engine

import (
	"fmt"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/verdict"
)

// SplitRevision splits a Flux artifact revision "<ref>@<algo>:<hash>" into its ref and "<algo>:<hash>".
// A revision without "@" ("sha1:<hash>") has an empty ref.
func SplitRevision(revision string) (ref, digest string, err error) {
	ref, digest = "", revision
	if i := strings.LastIndex(revision, "@"); i >= 0 {
		ref, digest = revision[:i], revision[i+1:]
	}
	algo, hash, ok := strings.Cut(digest, ":")
	if !ok || algo == "" || hash == "" {
		return "", "", fmt.Errorf("revision %q is not a Flux artifact revision like main@sha1:<commit> or latest@sha256:<digest>", revision)
	}
	return ref, digest, nil
}

// Observation is what one cluster's member (its Kustomization or HelmRelease) says about the
// revision it runs.
type Observation struct {
	Exists        bool
	Source        string // sourceRef.name
	Current       bool   // status.observedGeneration == metadata.generation
	ReadyCurrent  bool   // the Ready condition was written for the current generation
	Ready         metav1.ConditionStatus
	Reason        string
	Message       string
	LastApplied   string
	LastAttempted string
	// Health is the outcome of the Kustomization's health checks (verdict.HealthChecks*): None when it
	// asks for none (no wait, no healthChecks), else its Healthy condition: Progressing while
	// kustomize-controller runs them.
	Health string
	// HealthReason and HealthMessage are the Healthy condition's.
	HealthReason, HealthMessage string
	// Stalled is true when kustomize-controller gave up on the current spec (Stalled=True).
	Stalled bool
	// Progressing is true while kustomize-controller works on the Kustomization: Ready or Healthy
	// Unknown, or Reconciling True, with reason Progressing, and Ready not False. Ready and Health
	// then say nothing yet of the reconcile under way.
	Progressing bool
	// LastReconciled and LastReconciledStatus are status.history's latest snapshot: the revision of
	// the last reconcile that got as far as applying, and how it ended (ReconciliationSucceeded,
	// HealthCheckFailed, ReconciliationFailed, PruneFailed); "" when the Kustomization keeps no
	// history.
	LastReconciled       string
	LastReconciledStatus string
}

// maxSeen bounds what an observation says it saw (Seen).
const maxSeen = 256

// Observe is what member obj says about the revision it runs: a Kustomization, or a HelmRelease
// (observeHelmRelease). Nothing (nil) says nothing: Exists false.
func Observe(obj Object) Observation {
	if absent(obj) {
		return Observation{}
	}
	switch m := obj.(type) {
	case *kustomizev1.Kustomization:
		return observeKustomization(m)
	case *helmv2.HelmRelease:
		return observeHelmRelease(m)
	}
	return Observation{}
}

func observeKustomization(ks *kustomizev1.Kustomization) Observation {
	o := Observation{
		Exists:        true,
		Source:        ks.Spec.SourceRef.Name,
		Current:       ks.Status.ObservedGeneration == ks.Generation,
		LastApplied:   ks.Status.LastAppliedRevision,
		LastAttempted: ks.Status.LastAttemptedRevision,
	}
	progressing := o.readConditions(ks.Status.Conditions, ks.Generation)
	o.Health = verdict.HealthChecksNone
	if ks.Spec.Wait || len(ks.Spec.HealthChecks) > 0 {
		o.Health = verdict.HealthChecksUnknown
		if c := apimeta.FindStatusCondition(ks.Status.Conditions, meta.HealthyCondition); c != nil {
			o.HealthReason, o.HealthMessage = c.Reason, c.Message
			switch {
			case c.Status == metav1.ConditionTrue:
				o.Health = verdict.HealthChecksPassed
			case c.Status == metav1.ConditionFalse:
				o.Health = verdict.HealthChecksFailed
			case c.Reason == meta.ProgressingReason:
				o.Health = verdict.HealthChecksProgressing
				progressing = true
			}
		}
	}
	o.Progressing = progressing && o.Ready != metav1.ConditionFalse
	if h := ks.Status.History.Latest(); h != nil {
		o.LastReconciled, o.LastReconciledStatus = h.Metadata["revision"], h.LastReconciledStatus
	}
	return o
}

// readConditions fills in what a Flux object's conditions say (Ready, its reason and message and
// whether it is of the current generation, Stalled), and tells whether the controller is at work
// on it: Ready Unknown, or Reconciling True, with reason Progressing.
func (o *Observation) readConditions(conds []metav1.Condition, generation int64) (progressing bool) {
	o.Ready, o.Stalled = metav1.ConditionUnknown, apimeta.IsStatusConditionTrue(conds, meta.StalledCondition)
	if c := apimeta.FindStatusCondition(conds, meta.ReadyCondition); c != nil {
		o.Ready, o.Reason, o.Message = c.Status, c.Reason, c.Message
		o.ReadyCurrent = c.ObservedGeneration == generation
		progressing = c.Status == metav1.ConditionUnknown && c.Reason == meta.ProgressingReason
	}
	if c := apimeta.FindStatusCondition(conds, meta.ReconcilingCondition); c != nil && c.Status == metav1.ConditionTrue && c.Reason == meta.ProgressingReason {
		progressing = true
	}
	return progressing
}

// ReadyAt tells whether the Kustomization has applied revision from source and is healthy: Ready
// for its current spec now, or, while kustomize-controller reconciles it again, by the last
// reconcile of the current spec that finished (Settled). kustomize-controller marks Ready Unknown
// at the start of every reconcile, the periodic one at the same revision too; at 1,000 clusters
// some are always in the middle of one.
func (o Observation) ReadyAt(source, revision string) bool {
	if o.readyNow(source, revision) {
		return true
	}
	ok, known := o.Settled(source, revision)
	return ok && known
}

func (o Observation) readyNow(source, revision string) bool {
	return o.Exists && o.Source == source && o.Current && o.Ready == metav1.ConditionTrue && SameRevision(o.LastApplied, revision)
}

// Settled tells, while kustomize-controller reconciles the Kustomization (Progressing), how its last
// finished reconcile of the current spec went, when that was of revision from source: ok when it
// succeeded (applied, health checks passed). known is false when there is none to go by: not
// mid-reconcile, no history, a spec changed since its last success, or a reconcile of another
// revision. status.history's latest snapshot is of the current spec when observedGeneration is the
// generation: the last success was of this spec, so every reconcile since was too.
func (o Observation) Settled(source, revision string) (ok, known bool) {
	if !o.Exists || o.Source != source || !o.Progressing || !o.Current || o.LastReconciled == "" || !SameRevision(o.LastReconciled, revision) {
		return false, false
	}
	return o.LastReconciledStatus == meta.ReconciliationSucceededReason, true
}

// RetryingAt tells whether kustomize-controller failed a reconcile of revision from source that it
// had applied, with the current spec, before, for a reason a retry may clear (retried), and has
// not given up (Stalled). Such a failure is waited
// for, within a bound, before it is judged; a failed health check, a failed build, or any failure
// of a revision the Kustomization never applied is a failure at once (FailedAt).
func (o Observation) RetryingAt(source, revision string) bool {
	return o.Exists && o.Source == source && o.ReadyCurrent && o.Ready == metav1.ConditionFalse && !o.Stalled &&
		o.Current && SameRevision(o.LastApplied, revision) && retried(o.Reason)
}

// waitingForSource tells whether kustomize-controller waits for the source rather than failed the
// revision (ArtifactFailed is both): the source not found (its cache may not hold a pinned source
// just created yet), the source without an artifact yet, or the artifact's file not in
// source-controller's storage (not yet, or no more after a restart that lost it); it retries each
// after --requeue-dependency. A wait that lasts is judged at the wave's deadline.
//
// helm-controller says the same of a HelmRelease's chart source in its own words: ArtifactFailed
// "could not get Source object: …" or "Source not ready: artifact not found. Retrying …", and
// SourceNotReady while the source has no artifact.
func (o Observation) waitingForSource() bool {
	if o.Reason == helmSourceNotReadyReason {
		return true
	}
	return o.Reason == meta.ArtifactFailedReason && (strings.HasPrefix(o.Message, "unable to get source ") ||
		strings.HasPrefix(o.Message, "Source artifact not found") || strings.HasPrefix(o.Message, "Source is not ready, artifact not found") ||
		strings.HasPrefix(o.Message, "could not get Source object") || strings.HasPrefix(o.Message, "Source not ready: artifact not found"))
}

// helmSourceNotReadyReason is helm-controller's Ready=False reason for a HelmRelease whose chart
// source has no artifact yet (it has no constant for it).
const helmSourceNotReadyReason = "SourceNotReady"

// retried tells the reasons kustomize-controller fails a reconcile for that a retry of the same
// revision and spec may clear: the apply (a member's API server that did not answer, say), the
// artifact's fetch, the garbage collection of stale objects.
func retried(reason string) bool {
	switch reason {
	case meta.ReconciliationFailedReason, meta.ArtifactFailedReason, meta.PruneFailedReason:
		return true
	}
	return false
}

// UnavailableAt tells whether the Kustomization, pointing at source with its current spec, failed
// its last reconcile for want of the member's API server (MemberUnavailable): not a failure of
// the revision, which kustomize-controller retries.
func (o Observation) UnavailableAt(source string) bool {
	return o.Exists && o.Source == source && o.ReadyCurrent && o.Ready == metav1.ConditionFalse && o.MemberUnavailable()
}

// MemberUnavailable tells whether kustomize-controller's last reconcile failed for want of the
// member's API server rather than because of the revision: ReconciliationFailed, not given up
// (Stalled), with a message that says the server, or a webhook it called, was unavailable, did not
// answer in time or throttled. The wave's deploySafe dry-ran the revision on the member before the
// switch, so the apply is admissible: the failure is retried (the template's retryInterval), and a
// wave whose failure budget cannot take it waits for it, as pending, until its deadline; it is not a
// failure of the revision.
//
// Of a HelmRelease, only the failures to reach the member before any release (helm-controller's
// RESTClientError, FactoryError, ReconcileError) are read so: an install or upgrade that failed
// says "context deadline exceeded" when its wait for the release's resources timed out, which is a
// failure of the revision, and cannot be told from a member that did not answer.
func (o Observation) MemberUnavailable() bool {
	if o.Stalled {
		return false
	}
	switch o.Reason {
	case meta.ReconciliationFailedReason, "RESTClientError", "FactoryError", "ReconcileError":
	default:
		return false
	}
	msg := strings.ToLower(o.Message)
	for _, m := range unavailableMessages {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// unavailableMessages are what the errors of an API server, or of the webhooks it calls, say when
// it could not serve a request then, lowercased: client-go's and the API server's own messages for
// 429, 503 and 504, etcd's timeout, and the transport's.
var unavailableMessages = []string{
	"the server is currently unable to handle the request",
	"the server has received too many requests",
	"the server was unable to return a response in the time allotted",
	"timeout: request did not complete within",
	"etcdserver: request timed out",
	"etcdserver: leader changed",
	"context deadline exceeded",
	"client.timeout exceeded",
	"i/o timeout",
	"tls handshake timeout",
	"connection refused",
	"connection reset by peer",
	"http2: client connection lost",
	"unexpected eof",
	"no endpoints available for service",
}

// Unsettled tells whether a member that applied revision from source with its current spec is
// between two outcomes now: failed for a reason a retry may clear (RetryingAt), or mid-reconcile
// with no finished reconcile to go by (no status.history) or right after such a failure. A
// decision waits for it, within a bound, then judges it as seen.
func (o Observation) Unsettled(source, revision string) bool {
	if o.AwaitingAt(source, revision) {
		return true
	}
	if !o.Exists || o.Source != source || !o.Current || !SameRevision(o.LastApplied, revision) {
		return false
	}
	if o.RetryingAt(source, revision) {
		return true
	}
	if !o.Progressing || o.readyNow(source, revision) {
		return false
	}
	_, known := o.Settled(source, revision)
	return !known || retried(o.LastReconciledStatus)
}

// JudgedAt is what the evidence says of a member at revision from source: whether it is Ready
// (ReadyAt), its health checks, and, when kustomize-controller was between two outcomes
// (Progressing, RetryingAt), what was seen. Mid-reconcile, the health checks are those of the last
// finished reconcile of the revision (Settled) when there is one, else what the Healthy condition
// says now (Progressing, say).
func (o Observation) JudgedAt(source, revision string) (ready bool, health, transient string) {
	ready, health = o.ReadyAt(source, revision), o.Health
	if health == "" {
		health = verdict.HealthChecksUnknown
	}
	if o.Source != source || !(o.Progressing || o.RetryingAt(source, revision)) {
		return ready, health, ""
	}
	if ok, known := o.Settled(source, revision); known && health != verdict.HealthChecksNone {
		switch {
		case ok:
			health = verdict.HealthChecksPassed
		case o.LastReconciledStatus == meta.HealthCheckFailedReason:
			health = verdict.HealthChecksFailed
		default:
			health = verdict.HealthChecksUnknown
		}
	}
	return ready, health, o.Seen()
}

// Seen says what the Kustomization's Ready and Healthy conditions say now, in one line:
// "Ready=Unknown Progressing: Reconciliation in progress; Healthy=Unknown Progressing: ...".
func (o Observation) Seen() string {
	if !o.Exists {
		return ""
	}
	s := "Ready=" + string(o.Ready)
	if o.Reason != "" {
		s += " " + o.Reason
	}
	if o.Message != "" {
		s += ": " + o.Message
	}
	if o.HealthReason != "" {
		s += "; Healthy=" + o.Health + " " + o.HealthReason
		if o.HealthMessage != "" {
			s += ": " + o.HealthMessage
		}
	}
	if len(s) > maxSeen {
		s = s[:maxSeen-3] + "..."
	}
	return s
}

// StillAt tells whether a Kustomization that was ready at revision still is: kustomize-controller
// marks Ready Unknown at the start of every reconcile of the same revision, which is not a loss of
// health; only a failure is.
func (o Observation) StillAt(source, revision string) bool {
	return o.Exists && o.Source == source && o.Ready != metav1.ConditionFalse && SameRevision(o.LastApplied, revision)
}

// AwaitingAt tells whether kustomize-controller, which last applied revision from source, has said
// nothing yet of the Kustomization's current spec: its Ready condition is of an earlier generation,
// or of a spec that was not tidegate's (notOurSpec in the controllers). A spec tidegate wrote back
// over someone else's edit during a soak is one: what the condition says, a failure of the edited
// path say, is about a spec that no longer is, so it neither passes nor fails the cluster, and the
// soak's decision waits for the reconcile of the current spec (Unsettled).
func (o Observation) AwaitingAt(source, revision string) bool {
	return o.Exists && o.Source == source && !o.ReadyCurrent && SameRevision(o.LastApplied, revision)
}

// WaitingForDependency tells whether kustomize-controller holds the Kustomization, pointing at
// source with its current spec, until a Kustomization it depends on (spec.dependsOn: another
// rollout's on the same cluster) is Ready, or exists (DependencyNotReady): it applied nothing of
// the spec yet, which is a wait, not a failure (FailedAt). Message then names the dependency.
func (o Observation) WaitingForDependency(source string) bool {
	return o.Exists && o.Source == source && o.ReadyCurrent && o.Ready == metav1.ConditionFalse && o.Reason == meta.DependencyNotReadyReason
}

// SameRevision compares two Flux revisions by the commit or digest they name: a source pinned by
// commit or digest alone reports "sha1:<commit>" where the tracked source said "main@sha1:<commit>".
func SameRevision(a, b string) bool {
	if a == b {
		return true
	}
	_, da, errA := SplitRevision(a)
	_, db, errB := SplitRevision(b)
	return errA == nil && errB == nil && da == db
}

// FailedAt tells whether the Kustomization failed with the spec that points at source, at revision:
// the apply, the build or the health check. Dependency and source waits are not failures of the
// revision, and neither is a retried failure of a revision it had applied with this spec
// (RetryingAt): that one is waited for. kustomize-controller moves status.observedGeneration only
// on success, so a failure of the current spec is recognised by the Ready condition's own
// observedGeneration; the pinned source's name is unique to the revision, so the spec points at
// nothing else.
func (o Observation) FailedAt(source, revision string) bool {
	if !o.Exists || o.Source != source || !o.ReadyCurrent || o.Ready != metav1.ConditionFalse || o.RetryingAt(source, revision) ||
		o.waitingForSource() || o.MemberUnavailable() {
		return false
	}
	switch o.Reason {
	case meta.HealthCheckFailedReason, meta.ReconciliationFailedReason, meta.BuildFailedReason,
		// Waves start only once the pinned source serves the revision, so an artifact failure here is
		// the revision's own (kustomize-controller reports a path missing from it this way, and
		// helm-controller an archive that is no chart).
		meta.ArtifactFailedReason,
		// A HelmRelease's values that do not compose, or a chart whose version does not match its
		// tag, fail the revision too.
		"ValuesError", "ChartMutateError":
		return true
	}
	// A HelmRelease's install, upgrade or tests that failed, or a release remediated (rolled back
	// or uninstalled) away from the candidate: the member does not run the revision, healthy.
	return releaseFailed(o.Reason)
}
