package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// pinnedSourceInterval is how often source-controller re-checks a pinned source. The pinned commit or
// digest never changes; the interval only bounds how long a lost artifact (storage wiped) stays lost.
const pinnedSourceInterval = 10 * time.Minute

// pinnedSource builds the source that pins revision of the rollout's tracked source: a copy of the
// tracked source with the same URL, credentials and verification, whose ref names exactly that commit
// (Git) or digest (OCI), or, for a HelmChart, whose version is exactly the revision's chart version
// (its ref: the revision of a HelmChart is "<version>@<digest>", collector.GetSource).
func pinnedSource(fr *v1alpha1.FleetRollout, tracked client.Object, name, revision string) (client.Object, error) {
	ref, digest, err := engine.SplitRevision(revision)
	if err != nil {
		return nil, fmt.Errorf("fleetrollout %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	objMeta := metav1.ObjectMeta{
		Name:        name,
		Namespace:   fr.Namespace,
		Labels:      fr.ShardLabels(map[string]string{v1alpha1.RolloutLabel: fr.Name}),
		Annotations: map[string]string{v1alpha1.RevisionAnnotation: revision},
	}
	switch src := tracked.(type) {
	case *sourcev1.GitRepository:
		algo, sha, _ := strings.Cut(digest, ":")
		if algo != "sha1" && algo != "sha256" {
			return nil, fmt.Errorf("fleetrollout %s/%s: revision %q does not name a Git commit", fr.Namespace, fr.Name, revision)
		}
		pin := &sourcev1.GitRepository{ObjectMeta: objMeta, Spec: *src.Spec.DeepCopy()}
		// A Git server may not serve a commit by SHA alone (the Go test server does not), so a branch
		// revision is pinned as branch + commit: source-controller fetches the branch and checks out the
		// commit, which must be in its history.
		pin.Spec.Reference = &sourcev1.GitRepositoryRef{Commit: sha}
		if src.Spec.Reference != nil && src.Spec.Reference.Branch != "" {
			pin.Spec.Reference.Branch = src.Spec.Reference.Branch
		} else if branch, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
			pin.Spec.Reference.Branch = branch
		}
		pin.Spec.Interval = metav1.Duration{Duration: pinnedSourceInterval}
		pin.Spec.Suspend = false
		return pin, nil
	case *sourcev1.OCIRepository:
		pin := &sourcev1.OCIRepository{ObjectMeta: objMeta, Spec: *src.Spec.DeepCopy()}
		pin.Spec.Reference = &sourcev1.OCIRepositoryRef{Digest: digest}
		pin.Spec.Interval = metav1.Duration{Duration: pinnedSourceInterval}
		pin.Spec.Suspend = false
		return pin, nil
	case *sourcev1.HelmChart:
		if why := unpinnable(fr, src); why != "" {
			return nil, fmt.Errorf("%s", why)
		}
		// A HelmRepository serves a chart by name and version, not by digest: the pin asks for the
		// version, and its artifact's digest is the revision's for as long as the repository
		// serves the same chart under it. The pinned source's revision says which it serves, and
		// a wave starts only once it serves the revision (digest and all).
		pin := &sourcev1.HelmChart{ObjectMeta: objMeta, Spec: *src.Spec.DeepCopy()}
		pin.Spec.Version = ref
		pin.Spec.Interval = metav1.Duration{Duration: pinnedSourceInterval}
		pin.Spec.Suspend = false
		return pin, nil
	}
	return nil, fmt.Errorf("fleetrollout %s/%s: source kind %T cannot be pinned", fr.Namespace, fr.Name, tracked)
}

// unpinnable says why the rollout's tracked source cannot be pinned, "" when it can: a HelmChart
// whose chart comes from a GitRepository or a Bucket (a chart directory) follows that moving source
// (a pin of its version would still follow the branch, and its artifact revision names the
// version, not the commit). A HelmChart of a HelmRepository can be pinned (its version), and so
// can every other source tidegate tracks.
func unpinnable(fr *v1alpha1.FleetRollout, tracked client.Object) string {
	hc, ok := tracked.(*sourcev1.HelmChart)
	if !ok || hc.Spec.SourceRef.Kind == sourcev1.HelmRepositoryKind {
		return ""
	}
	return fmt.Sprintf("fleetrollout %s/%s: HelmChart %s takes its chart from %s %s, which moves: tidegate pins a HelmChart of a HelmRepository only "+
		"(a chart version it serves). Serve the chart from a HelmRepository (or push it to an OCI registry with helm push, as an OCIRepository "+
		"or a HelmRepository of type oci) and point spec.sourceRef at a HelmChart of that HelmRepository, or at an OCIRepository of the chart",
		fr.Namespace, fr.Name, hc.Name, hc.Spec.SourceRef.Kind, hc.Spec.SourceRef.Name)
}

// ensurePinnedSource creates the pinned source for revision if it does not exist. An existing pinned
// source is left as it is: its ref already names the revision. c is the manager's client, so the
// existence check reads the cache and a pass over pins that exist makes no API call; a Create is
// tried only when the cache has none, and AlreadyExists then (the cache lagging a create of a moment
// ago) is as good as done. beforeCreate, when set, runs just before the create (the crash-point hook).
func ensurePinnedSource(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, tracked client.Object, rev *v1alpha1.RevisionStatus, beforeCreate func() error) error {
	revision := rev.Revision
	name := rev.Source
	if name == "" {
		name = v1alpha1.PinnedSourceName(fr.Name, revision)
	}
	pin, err := pinnedSource(fr, tracked, name, revision)
	if err != nil {
		return err
	}
	existing, ok := pin.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("pinned source %s/%s: %T is not an object", fr.Namespace, pin.GetName(), pin)
	}
	switch err := c.Get(ctx, client.ObjectKeyFromObject(pin), existing); {
	case err == nil:
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading pinned source %s/%s for revision %s: %w", fr.Namespace, pin.GetName(), revision, err)
	}
	if err := controllerutil.SetControllerReference(fr, pin, c.Scheme()); err != nil {
		return err
	}
	if beforeCreate != nil {
		if err := beforeCreate(); err != nil {
			return err
		}
	}
	err = c.Create(ctx, pin, client.FieldOwner(v1alpha1.FieldManager))
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating pinned source %s/%s for revision %s: %w", fr.Namespace, pin.GetName(), revision, err)
	}
	return nil
}

// prunePinnedSources deletes the rollout's pinned sources that nothing needs: not the candidate's,
// not the known-good's, not one of status.history (a rollback of a completed rollout goes back to
// one), not one a Kustomization still uses, and not among the newest historyLimit others.
// beforeDelete, when set, runs just before each delete (the crash-point hook).
func prunePinnedSources(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, kind string, inUse map[string]bool, beforeDelete func(name string) error) error {
	list, err := listPinned(ctx, c, fr.Namespace, fr.Name, kind)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for n := range inUse {
		keep[n] = true
	}
	for _, r := range []*v1alpha1.RevisionStatus{fr.Status.Candidate, fr.Status.LastKnownGood} {
		if r != nil {
			keep[r.Source] = true
		}
	}
	for _, h := range fr.Status.History {
		keep[h.Source] = true
	}
	sort.Slice(list, func(i, j int) bool {
		ti, tj := list[i].GetCreationTimestamp(), list[j].GetCreationTimestamp()
		return tj.Before(&ti)
	})
	history := 0
	for _, o := range list {
		if keep[o.GetName()] {
			continue
		}
		if history < fr.HistoryLimit() {
			history++
			continue
		}
		if beforeDelete != nil {
			if err := beforeDelete(o.GetName()); err != nil {
				return err
			}
		}
		if err := c.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("pruning pinned source %s/%s: %w", o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

// listPinned lists the pinned sources of kind of the rollout in namespace ns.
func listPinned(ctx context.Context, c client.Client, ns, rollout, kind string) ([]client.Object, error) {
	var list client.ObjectList
	switch kind {
	case sourcev1.GitRepositoryKind:
		list = &sourcev1.GitRepositoryList{}
	case sourcev1.OCIRepositoryKind:
		list = &sourcev1.OCIRepositoryList{}
	case sourcev1.HelmChartKind:
		list = &sourcev1.HelmChartList{}
	default:
		return nil, nil
	}
	if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.RolloutLabel: rollout}); err != nil {
		return nil, err
	}
	items, err := apimeta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(items))
	for _, o := range items {
		if obj, ok := o.(client.Object); ok {
			out = append(out, obj)
		}
	}
	return out, nil
}
