package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// (Git) or digest (OCI).
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
	}
	return nil, fmt.Errorf("fleetrollout %s/%s: source kind %T cannot be pinned", fr.Namespace, fr.Name, tracked)
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

func listPinned(ctx context.Context, c client.Client, ns, rollout, kind string) ([]client.Object, error) {
	opts := []client.ListOption{client.InNamespace(ns), client.MatchingLabels{v1alpha1.RolloutLabel: rollout}}
	var out []client.Object
	switch kind {
	case sourcev1.GitRepositoryKind:
		var l sourcev1.GitRepositoryList
		if err := c.List(ctx, &l, opts...); err != nil {
			return nil, err
		}
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case sourcev1.OCIRepositoryKind:
		var l sourcev1.OCIRepositoryList
		if err := c.List(ctx, &l, opts...); err != nil {
			return nil, err
		}
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out, nil
}
