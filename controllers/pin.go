package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// pinnedSourceInterval is how often source-controller re-checks a pinned source. The pinned commit or
// digest never changes; the interval only bounds how long a lost artifact (storage wiped) stays lost.
const pinnedSourceInterval = 10 * time.Minute

// sourceState is what the engine knows of a Flux source: the tracked one or a pinned one.
type sourceState struct {
	Name     string
	Exists   bool
	Ready    bool
	Message  string
	Revision string // artifact revision, "" when there is no artifact
	Digest   string
	URL      string // where source-controller serves the artifact
	// Verification is the provider the source asks to verify its artifact with ("" for none), and
	// Verified and VerifyMessage are its SourceVerified condition.
	Verification  string
	Verified      bool
	VerifyMessage string
}

func stateOf(obj sourcev1.Source, name string, getter conditions.Getter) sourceState {
	s := sourceState{Name: name, Exists: true, Ready: conditions.IsReady(getter)}
	if c := conditions.Get(getter, meta.ReadyCondition); c != nil {
		s.Message = c.Message
	}
	if a := obj.GetArtifact(); a != nil {
		s.Revision, s.Digest, s.URL = a.Revision, a.Digest, a.URL
	}
	if c := conditions.Get(getter, sourcev1.SourceVerifiedCondition); c != nil {
		s.Verified, s.VerifyMessage = c.Status == metav1.ConditionTrue, c.Message
	}
	return s
}

// getSource reads a Flux source of the rollout's namespace and returns its object and state.
func getSource(ctx context.Context, c client.Reader, ns, kind, name string) (client.Object, sourceState, error) {
	key := types.NamespacedName{Namespace: ns, Name: name}
	switch kind {
	case sourcev1.GitRepositoryKind:
		var o sourcev1.GitRepository
		if err := c.Get(ctx, key, &o); err != nil {
			return nil, sourceState{Name: name}, err
		}
		s := stateOf(&o, name, &o)
		if o.Spec.Verification != nil {
			s.Verification = "openpgp" // the one provider GitRepository verifies commits and tags with
		}
		return &o, s, nil
	case sourcev1.OCIRepositoryKind:
		var o sourcev1.OCIRepository
		if err := c.Get(ctx, key, &o); err != nil {
			return nil, sourceState{Name: name}, err
		}
		s := stateOf(&o, name, &o)
		if o.Spec.Verify != nil {
			s.Verification = o.Spec.Verify.Provider
		}
		return &o, s, nil
	}
	return nil, sourceState{Name: name}, fmt.Errorf("source kind %q is not supported: use GitRepository or OCIRepository", kind)
}

// splitRevision splits a Flux artifact revision "<ref>@<algo>:<hash>" into its ref and "<algo>:<hash>".
// A revision without "@" ("sha1:<hash>") has an empty ref.
func splitRevision(revision string) (ref, digest string, err error) {
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

// pinnedSource builds the source that pins revision of the rollout's tracked source: a copy of the
// tracked source with the same URL, credentials and verification, whose ref names exactly that commit
// (Git) or digest (OCI).
func pinnedSource(fr *v1alpha1.FleetRollout, tracked client.Object, revision string) (client.Object, error) {
	ref, digest, err := splitRevision(revision)
	if err != nil {
		return nil, fmt.Errorf("fleetrollout %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	objMeta := metav1.ObjectMeta{
		Name:        v1alpha1.PinnedSourceName(fr.Name, revision),
		Namespace:   fr.Namespace,
		Labels:      map[string]string{v1alpha1.RolloutLabel: fr.Name},
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
// source is left as it is: its ref already names the revision.
func ensurePinnedSource(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, tracked client.Object, revision string) error {
	pin, err := pinnedSource(fr, tracked, revision)
	if err != nil {
		return err
	}
	if err := controllerutil.SetControllerReference(fr, pin, c.Scheme()); err != nil {
		return err
	}
	err = c.Create(ctx, pin, client.FieldOwner(v1alpha1.FieldManager))
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating pinned source %s/%s for revision %s: %w", fr.Namespace, pin.GetName(), revision, err)
	}
	return nil
}

// prunePinnedSources deletes the rollout's pinned sources that nothing needs: not the candidate's,
// not the known-good's, not one a Kustomization still uses, and not among the newest historyLimit others.
func prunePinnedSources(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, kind string, inUse map[string]bool) error {
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
