package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// ClusterRevisions is what one cluster should run and runs, per rollout that targets it.
type ClusterRevisions struct {
	Cluster  Ref               `json:"cluster"`
	Rollouts []ClusterRevision `json:"rollouts"`
}

// ClusterRevision is one rollout's revision on one cluster: the desired one (what tidegate asks
// Flux to apply there, the spec of the cluster's member: its Kustomization, or for a rollout of a
// Helm chart its HelmRelease) beside the live one (what kustomize-controller or helm-controller
// reports it applied, the member's status).
type ClusterRevision struct {
	Rollout string `json:"rollout"`
	// Wave is the wave the cluster is a member of in the rollout's status, else the one its
	// member is labelled with.
	Wave string `json:"wave,omitempty"`
	// Kustomization is the per-cluster Kustomization of a rollout of a kustomize package; nil when
	// the rollout has not written one yet.
	Kustomization *Ref `json:"kustomization,omitempty"`
	// HelmRelease is the per-cluster HelmRelease of a rollout of a Helm chart (spec.chart); nil
	// when the rollout has not written one yet.
	HelmRelease *Ref             `json:"helmRelease,omitempty"`
	Desired     *DesiredRevision `json:"desired,omitempty"`
	Live        *LiveRevision    `json:"live,omitempty"`
	// Agree is true when the live revision is the desired one: the member last applied the
	// revision it points at, and its Ready condition is True for its current spec.
	Agree bool `json:"agree"`
	// Message says why they do not agree, or what is in between.
	Message string `json:"message,omitempty"`
}

// DesiredRevision is what the cluster's member asks for: the revision tidegate switched it to
// (annotation tidegate.dev/revision), the pinned source it points at (a Kustomization's
// spec.sourceRef, a HelmRelease's spec.chartRef) and that source's artifact digest.
type DesiredRevision struct {
	Revision string `json:"revision"`
	Digest   string `json:"digest,omitempty"`
	Source   Ref    `json:"source"`
	// Role is what the revision is to the rollout: candidate, known-good, or "" for neither.
	Role string `json:"role,omitempty"`
}

// LiveRevision is what kustomize-controller reports of a Kustomization, or helm-controller of a
// HelmRelease, as the engine observes it (engine.Observe): a Kustomization's
// status.lastAppliedRevision and lastAttemptedRevision; for a HelmRelease, the OCI digest of the
// chart of its latest release (status.history, a release that failed too) and
// status.lastAttemptedRevisionDigest, which name the revision as its pinned source's
// "<tag>@sha256:<digest>" does.
type LiveRevision struct {
	LastAppliedRevision   string       `json:"lastAppliedRevision,omitempty"`
	LastAttemptedRevision string       `json:"lastAttemptedRevision,omitempty"`
	Ready                 Condition    `json:"ready"`
	Since                 *metav1.Time `json:"since,omitempty"`
	// Current is false while Flux has not yet acted on the member's latest spec
	// (status.observedGeneration behind metadata.generation).
	Current bool `json:"current"`
}

// RevisionsOf says, for cluster ns/name, per rollout of ns that targets it (a member labelled with
// the cluster, or a wave of the rollout's status listing it), or for rollout alone when it is
// given, what the cluster should run and what it runs.
func RevisionsOf(ctx context.Context, c client.Client, ns, cluster, rollout string) (ClusterRevisions, error) {
	out := ClusterRevisions{Cluster: Ref{Kind: "fleetcluster", Namespace: ns, Name: cluster}, Rollouts: []ClusterRevision{}}
	if cluster == "" {
		return out, Errorf(CodeInvalid, nil, "name the cluster whose revisions to show")
	}
	var fc v1alpha1.FleetCluster
	clusterErr := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster}, &fc)
	if clusterErr != nil && !apierrors.IsNotFound(clusterErr) {
		return out, AsError(clusterErr, out.Cluster)
	}

	sel := client.MatchingLabels{v1alpha1.ClusterLabel: cluster}
	var rollouts []v1alpha1.FleetRollout
	if rollout != "" {
		sel[v1alpha1.RolloutLabel] = rollout
		fr := v1alpha1.FleetRollout{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: rollout}, &fr); err != nil {
			return out, AsError(err, RolloutRef(ns, rollout))
		}
		rollouts = append(rollouts, fr)
	} else {
		var list v1alpha1.FleetRolloutList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return out, AsError(err, Ref{Kind: "fleetrollouts", Namespace: ns})
		}
		rollouts = list.Items
	}
	// The cluster's members, by kind and rollout: each kind the rollouts' members are of is listed
	// once (HelmReleases only when a rollout is of a chart, see ListMembers), and a rollout's member
	// is one of its kind.
	members := map[string]map[string]engine.Object{}
	for i := range rollouts {
		kind := engine.MemberKind(&rollouts[i])
		if members[kind] != nil {
			continue
		}
		objs, err := ListMembers(ctx, c, &rollouts[i], client.InNamespace(ns), sel)
		if err != nil {
			return out, AsError(err, Ref{Kind: strings.ToLower(kind) + "s", Namespace: ns})
		}
		// Should two name the same rollout, the one whose name sorts first counts, as the
		// FleetCluster controller's status.rollouts has it.
		slices.SortFunc(objs, func(a, b engine.Object) int { return strings.Compare(a.GetName(), b.GetName()) })
		members[kind] = map[string]engine.Object{}
		for _, obj := range objs {
			if r := obj.GetLabels()[v1alpha1.RolloutLabel]; members[kind][r] == nil {
				members[kind][r] = obj
			}
		}
	}

	for i := range rollouts {
		fr := &rollouts[i]
		member := members[engine.MemberKind(fr)][fr.Name]
		wave := waveOf(fr, cluster)
		if member == nil && wave == "" && rollout == "" {
			continue // the rollout does not target this cluster
		}
		cr, err := clusterRevision(ctx, c, fr, cluster, wave, member)
		if err != nil {
			return out, err
		}
		out.Rollouts = append(out.Rollouts, cr)
	}
	// Only a cluster nothing refers to is not found: the members of a FleetCluster that was
	// deleted still say what they run.
	if apierrors.IsNotFound(clusterErr) && len(out.Rollouts) == 0 {
		return out, AsError(clusterErr, out.Cluster)
	}
	return out, nil
}

// waveOf is the wave of the rollout's status whose members include cluster, "" for none.
func waveOf(fr *v1alpha1.FleetRollout, cluster string) string {
	for _, w := range fr.Status.Waves {
		if slices.Contains(w.Clusters, cluster) {
			return w.Name
		}
	}
	return ""
}

// clusterRevision is what member (of fr's kind, nil when fr has written none for cluster) asks
// for and reports.
func clusterRevision(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, cluster, wave string, member client.Object) (ClusterRevision, error) {
	cr := ClusterRevision{Rollout: fr.Name, Wave: wave}
	kind := engine.MemberKind(fr)
	if member == nil {
		cr.Message = fmt.Sprintf("no %s %s yet: the rollout has not switched this cluster to any revision", kind, v1alpha1.KustomizationName(fr.Name, cluster))
		if wave != "" {
			cr.Message = fmt.Sprintf("no %s %s yet: wave %s has not switched this cluster", kind, v1alpha1.KustomizationName(fr.Name, cluster), wave)
		}
		return cr, nil
	}
	if cr.Wave == "" {
		cr.Wave = member.GetLabels()[v1alpha1.WaveLabel]
	}
	ref := &Ref{Kind: kind, Namespace: member.GetNamespace(), Name: member.GetName()}
	if fr.IsChart() {
		cr.HelmRelease = ref
	} else {
		cr.Kustomization = ref
	}
	desired, err := desiredOf(ctx, c, fr, member)
	if err != nil {
		return cr, err
	}
	cr.Desired = desired
	cr.Live = liveOf(member)
	cr.Agree, cr.Message = agree(kind, desired, cr.Live)
	return cr, nil
}

// desiredOf reads what member asks for. The digest is that of the pinned source's artifact; a
// pinned source that is gone or serves nothing leaves the digest the rollout's status recorded for
// that source, and when neither knows it, none.
func desiredOf(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, member client.Object) (*DesiredRevision, error) {
	kind, ns, name := engine.MemberSourceRef(member)
	if ns == "" {
		ns = member.GetNamespace()
	}
	d := &DesiredRevision{Revision: member.GetAnnotations()[v1alpha1.RevisionAnnotation], Source: Ref{Kind: kind, Namespace: ns, Name: name}}
	// The candidate first: after a rollout completed, it is the known-good as well.
	for _, r := range []struct {
		role string
		rev  *v1alpha1.RevisionStatus
	}{{"candidate", fr.Status.Candidate}, {"known-good", fr.Status.LastKnownGood}} {
		if r.rev != nil && r.rev.Source == name {
			d.Role, d.Digest = r.role, r.rev.Digest
			if d.Revision == "" {
				d.Revision = r.rev.Revision
			}
			break
		}
	}
	var artifact *meta.Artifact
	key := client.ObjectKey{Namespace: ns, Name: name}
	var err error
	switch kind {
	case sourcev1.GitRepositoryKind:
		var s sourcev1.GitRepository
		if err = c.Get(ctx, key, &s); err == nil {
			artifact = s.Status.Artifact
		}
	case sourcev1.OCIRepositoryKind:
		var s sourcev1.OCIRepository
		if err = c.Get(ctx, key, &s); err == nil {
			artifact = s.Status.Artifact
		}
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, AsError(err, d.Source)
	}
	if artifact != nil {
		d.Digest = artifact.Digest
		if d.Revision == "" {
			d.Revision = artifact.Revision
		}
	}
	return d, nil
}

// liveOf is what member reports it applied, as the engine observes it.
func liveOf(member client.Object) *LiveRevision {
	o := engine.Observe(member)
	l := &LiveRevision{
		LastAppliedRevision:   o.LastApplied,
		LastAttemptedRevision: o.LastAttempted,
		Ready:                 Condition{Status: string(metav1.ConditionUnknown)},
		Current:               o.Current,
	}
	if rc := memberReady(member); rc != nil {
		l.Ready = Condition{Status: string(rc.Status), Reason: rc.Reason, Message: OneLine(rc.Message)}
		l.Since = &rc.LastTransitionTime
	}
	return l
}

// agree tells whether the live revision of a member of kind is the desired one, and else what
// stands between them. Revisions compare by the commit or digest they name (engine.SameRevision):
// a HelmRelease reports the digest alone.
func agree(kind string, d *DesiredRevision, l *LiveRevision) (bool, string) {
	controller := memberController(kind)
	switch {
	case d.Revision == "":
		return false, "the " + kind + " does not say which revision it was switched to (no " + v1alpha1.RevisionAnnotation + " annotation)"
	case l.LastAppliedRevision == "" && l.LastAttemptedRevision == "":
		return false, controller + " has applied nothing yet"
	case !engine.SameRevision(l.LastAppliedRevision, d.Revision) && engine.SameRevision(l.LastAttemptedRevision, d.Revision):
		return false, fmt.Sprintf("applying %s failed or is under way (Ready %s: %s); the cluster still runs %s", d.Revision, l.Ready.Status, OrDash(l.Ready.Message), OrDash(l.LastAppliedRevision))
	case !engine.SameRevision(l.LastAppliedRevision, d.Revision):
		return false, fmt.Sprintf("the cluster runs %s; %s has not yet attempted %s", OrDash(l.LastAppliedRevision), controller, d.Revision)
	case !l.Current:
		return false, controller + " has not yet acted on the " + kind + "'s latest spec"
	case l.Ready.Status != string(metav1.ConditionTrue):
		return false, strings.TrimSpace(fmt.Sprintf("applied, but Ready is %s: %s", l.Ready.Status, l.Ready.Message))
	}
	return true, ""
}
