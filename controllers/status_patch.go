package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// statusPatch writes what a reconcile changed in an object's status as one merge patch of the
// status subresource, from the object as the reconcile read it: the conditions and the rest land
// together or not at all. Flux's patch helper sends the conditions and the rest of the status as
// two requests (so that several controllers can share an object's conditions); when the second
// fails, the object is left with conditions about a state its status does not hold, such as a
// gate's decision over a wave whose members are not recorded. tidegate's objects have one writer
// of status, so one request is both enough and whole.
//
// The patch carries the resourceVersion the reconcile read (an optimistic lock): a writer whose read
// is stale (a deposed leader's delayed request, a second replica started by mistake, or simply a
// spec change since the read) gets a Conflict and writes nothing; its next reconcile reads again
// and decides again. So no status computed from an older object overwrites a newer one, and a
// decided wave is never undone by a late patch.
type statusPatch struct {
	before client.Object
}

// newStatusPatch remembers obj as read, before the reconcile changes it.
func newStatusPatch(obj client.Object) *statusPatch {
	return &statusPatch{before: obj.DeepCopyObject().(client.Object)}
}

// Patch sends the change from the object as read to obj, nothing when nothing changed; obj is
// updated from the response, and the next Patch sends only what changed after it.
func (p *statusPatch) Patch(ctx context.Context, c client.Client, obj client.Object) error {
	data, err := client.MergeFrom(p.before).Data(obj)
	if err != nil {
		return err
	}
	if string(data) != "{}" {
		locked := client.MergeFromWithOptions(p.before, client.MergeFromWithOptimisticLock{})
		if err := c.Status().Patch(ctx, obj, locked, client.FieldOwner(v1alpha1.FieldManager)); err != nil {
			return err
		}
	}
	p.before = obj.DeepCopyObject().(client.Object)
	return nil
}
