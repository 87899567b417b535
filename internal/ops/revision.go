package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// ClusterRevisions is what one cluster should run and runs, per rollout that targets it.
type ClusterRevisions struct {
	Cluster  Ref               `json:"cluster"`
	Rollouts []ClusterRevision `json:"rollouts"`
}

// ClusterRevision is one rollout's revision on one cluster: the desired one (what tidegate asks
// Flux to apply there, the per-cluster Kustomization's spec) beside the live one (what
// kustomize-controller reports it applied, the Kustomization's status).
type ClusterRevision struct {
	Rollout string `json:"rollout"`
	// Wave is the wave the cluster is a member of in the rollout's status, else the one its
	// Kustomization is labelled with.
	Wave string `json:"wave,omitempty"`
	// Kustomization is the per-cluster Kustomization; nil when the rollout has not written one yet.
	Kustomization *Ref             `json:"kustomization,omitempty"`
	Desired       *DesiredRevision `json:"desired,omitempty"`
	Live          *LiveRevision    `json:"live,omitempty"`
	// Agree is true when the live revision is the desired one: the Kustomization last applied
	// the revision it points at, and its Ready condition is True for its current spec.
	Agree bool `json:"agree"`
	// Message says why they do not agree, or what is in between.
	Message string `json:"message,omitempty"`
}

// DesiredRevision is what the per-cluster Kustomization asks for: the revision tidegate switched
// it to (annotation tidegate.dev/revision), the pinned source it points at (spec.sourceRef) and
// that source's artifact digest.
type DesiredRevision struct {
	Revision string `json:"revision"`
	Digest   string `json:"digest,omitempty"`
	Source   Ref    `json:"source"`
	// Role is what the revision is to the rollout: candidate, known-good, or "" for neither.
	Role string `json:"role,omitempty"`
}

// LiveRevision is what kustomize-controller reports of the Kustomization.
type LiveRevision struct {
	LastAppliedRevision   string       `json:"lastAppliedRevision,omitempty"`
	LastAttemptedRevision string       `json:"lastAttemptedRevision,omitempty"`
	Ready                 Condition    `json:"ready"`
	Since                 *metav1.Time `json:"since,omitempty"`
	// Current is false while kustomize-controller has not yet acted on the Kustomization's
	// latest spec (status.observedGeneration behind metadata.generation).
	Current bool `json:"current"`
}

// RevisionsOf says, for cluster ns/name, per rollout of ns that targets it (a Kustomization
// labelled with the cluster, or a wave of the rollout's status listing it), or for rollout alone
// when it is given, what the cluster should run and what it runs.
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
	var kss kustomizev1.KustomizationList
	if err := c.List(ctx, &kss, client.InNamespace(ns), sel); err != nil {
		return out, AsError(err, Ref{Kind: "kustomizations", Namespace: ns})
	}
	byRollout := map[string]*kustomizev1.Kustomization{}
	// Should two name the same rollout, the one whose name sorts first counts, as the FleetCluster
	// controller's status.rollouts has it.
	slices.SortFunc(kss.Items, func(a, b kustomizev1.Kustomization) int { return strings.Compare(a.Name, b.Name) })
	for i := range kss.Items {
		if r := kss.Items[i].Labels[v1alpha1.RolloutLabel]; byRollout[r] == nil {
			byRollout[r] = &kss.Items[i]
		}
	}

	for i := range rollouts {
		fr := &rollouts[i]
		ks := byRollout[fr.Name]
		wave := waveOf(fr, cluster)
		if ks == nil && wave == "" && rollout == "" {
			continue // the rollout does not target this cluster
		}
		cr, err := clusterRevision(ctx, c, fr, cluster, wave, ks)
		if err != nil {
			return out, err
		}
		out.Rollouts = append(out.Rollouts, cr)
	}
	// Only a cluster nothing refers to is not found: Kustomizations of a FleetCluster that was
	// deleted still say what its members run.
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

func clusterRevision(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, cluster, wave string, ks *kustomizev1.Kustomization) (ClusterRevision, error) {
	cr := ClusterRevision{Rollout: fr.Name, Wave: wave}
	if ks == nil {
		cr.Message = "no Kustomization " + v1alpha1.KustomizationName(fr.Name, cluster) + " yet: the rollout has not switched this cluster to any revision"
		if wave != "" {
			cr.Message = fmt.Sprintf("no Kustomization %s yet: wave %s has not switched this cluster", v1alpha1.KustomizationName(fr.Name, cluster), wave)
		}
		return cr, nil
	}
	if cr.Wave == "" {
		cr.Wave = ks.Labels[v1alpha1.WaveLabel]
	}
	cr.Kustomization = &Ref{Kind: kustomizev1.KustomizationKind, Namespace: ks.Namespace, Name: ks.Name}
	desired, err := desiredOf(ctx, c, fr, ks)
	if err != nil {
		return cr, err
	}
	cr.Desired = desired
	cr.Live = liveOf(ks)
	cr.Agree, cr.Message = agree(desired, cr.Live)
	return cr, nil
}

// desiredOf reads what ks asks for. The digest is that of the pinned source's artifact; a pinned
// source that is gone or serves nothing leaves the digest the rollout's status recorded for that
// source, and when neither knows it, none.
func desiredOf(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, ks *kustomizev1.Kustomization) (*DesiredRevision, error) {
	ref := ks.Spec.SourceRef
	ns := ref.Namespace
	if ns == "" {
		ns = ks.Namespace
	}
	d := &DesiredRevision{Revision: ks.Annotations[v1alpha1.RevisionAnnotation], Source: Ref{Kind: ref.Kind, Namespace: ns, Name: ref.Name}}
	// The candidate first: after a rollout completed, it is the known-good as well.
	for _, r := range []struct {
		role string
		rev  *v1alpha1.RevisionStatus
	}{{"candidate", fr.Status.Candidate}, {"known-good", fr.Status.LastKnownGood}} {
		if r.rev != nil && r.rev.Source == ref.Name {
			d.Role, d.Digest = r.role, r.rev.Digest
			if d.Revision == "" {
				d.Revision = r.rev.Revision
			}
			break
		}
	}
	var artifact *meta.Artifact
	key := client.ObjectKey{Namespace: ns, Name: ref.Name}
	var err error
	switch ref.Kind {
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

func liveOf(ks *kustomizev1.Kustomization) *LiveRevision {
	l := &LiveRevision{
		LastAppliedRevision:   ks.Status.LastAppliedRevision,
		LastAttemptedRevision: ks.Status.LastAttemptedRevision,
		Ready:                 Condition{Status: string(metav1.ConditionUnknown)},
		Current:               ks.Status.ObservedGeneration >= ks.Generation,
	}
	if rc := apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition); rc != nil {
		l.Ready = Condition{Status: string(rc.Status), Reason: rc.Reason, Message: OneLine(rc.Message)}
		l.Since = &rc.LastTransitionTime
	}
	return l
}

// agree tells whether the live revision is the desired one, and else what stands between them.
func agree(d *DesiredRevision, l *LiveRevision) (bool, string) {
	switch {
	case d.Revision == "":
		return false, "the Kustomization does not say which revision it was switched to (no " + v1alpha1.RevisionAnnotation + " annotation)"
	case l.LastAppliedRevision == "" && l.LastAttemptedRevision == "":
		return false, "kustomize-controller has applied nothing yet"
	case l.LastAppliedRevision != d.Revision && l.LastAttemptedRevision == d.Revision:
		return false, fmt.Sprintf("applying %s failed or is under way (Ready %s: %s); the cluster still runs %s", d.Revision, l.Ready.Status, OrDash(l.Ready.Message), OrDash(l.LastAppliedRevision))
	case l.LastAppliedRevision != d.Revision:
		return false, fmt.Sprintf("the cluster runs %s; kustomize-controller has not yet attempted %s", OrDash(l.LastAppliedRevision), d.Revision)
	case !l.Current:
		return false, "kustomize-controller has not yet acted on the Kustomization's latest spec"
	case l.Ready.Status != string(metav1.ConditionTrue):
		return false, strings.TrimSpace(fmt.Sprintf("applied, but Ready is %s: %s", l.Ready.Status, l.Ready.Message))
	}
	return true, ""
}
