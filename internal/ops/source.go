package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// SourceFetched is what a source reported once it handled a reconcile request.
type SourceFetched struct {
	Source   Ref    `json:"source"`
	Revision string `json:"revision,omitempty"`
	Ready    string `json:"ready"`
	Message  string `json:"message,omitempty"`
}

// ReconcileSource asks the source fr tracks to fetch now, as flux reconcile source does (the
// annotation reconcile.fluxcd.io/requestedAt set to value), and waits, polling every poll, until
// source-controller has handled the request; ctx bounds the wait (a CodeTimeout error).
func ReconcileSource(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, value string, poll time.Duration) (SourceFetched, error) {
	key := types.NamespacedName{Namespace: fr.Namespace, Name: fr.Spec.SourceRef.Name}
	var src client.Object
	switch fr.Spec.SourceRef.Kind {
	case sourcev1.GitRepositoryKind:
		src = &sourcev1.GitRepository{}
	case sourcev1.OCIRepositoryKind:
		src = &sourcev1.OCIRepository{}
	default:
		return SourceFetched{}, Errorf(CodeInvalid, refOf(fr), "%s tracks a %s, which cannot be asked to fetch", refOf(fr), fr.Spec.SourceRef.Kind)
	}
	ref := Ref{Kind: fr.Spec.SourceRef.Kind, Namespace: key.Namespace, Name: key.Name}
	if err := c.Get(ctx, key, src); err != nil {
		return SourceFetched{}, AsError(err, ref)
	}
	before := src.DeepCopyObject().(client.Object)
	ann := src.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[meta.ReconcileRequestAnnotation] = value
	src.SetAnnotations(ann)
	if err := c.Patch(ctx, src, client.MergeFrom(before), client.FieldOwner(FieldManager)); err != nil {
		return SourceFetched{}, AsError(err, ref)
	}
	for {
		if err := c.Get(ctx, key, src); err != nil && !PastDeadline(ctx, err) {
			return SourceFetched{}, AsError(err, ref)
		}
		if f, ok := fetched(src, value); ok {
			f.Source = ref
			return f, nil
		}
		select {
		case <-ctx.Done():
			return SourceFetched{}, Errorf(CodeTimeout, &ref, "%s did not handle the reconcile request %s in time: is source-controller running?", ref, value)
		case <-time.After(poll):
		}
	}
}

// fetched reads, from a source, whether it handled request value, and what it reports.
func fetched(src client.Object, value string) (SourceFetched, bool) {
	var (
		handled string
		art     *meta.Artifact
		conds   []metav1.Condition
	)
	switch s := src.(type) {
	case *sourcev1.GitRepository:
		handled, art, conds = s.Status.LastHandledReconcileAt, s.Status.Artifact, s.Status.Conditions
	case *sourcev1.OCIRepository:
		handled, art, conds = s.Status.LastHandledReconcileAt, s.Status.Artifact, s.Status.Conditions
	}
	if handled != value {
		return SourceFetched{}, false
	}
	f := SourceFetched{Ready: string(metav1.ConditionUnknown)}
	if art != nil {
		f.Revision = art.Revision
	}
	if c := apimeta.FindStatusCondition(conds, meta.ReadyCondition); c != nil {
		f.Ready, f.Message = string(c.Status), c.Message
	}
	return f, true
}

// String says it as the command line prints it.
func (f SourceFetched) String() string {
	return fmt.Sprintf("%s: fetched, revision %s, Ready %s", f.Source, OrDash(f.Revision), f.Ready)
}
