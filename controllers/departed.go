package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// orphanDeparted carries out status.orphaned: each listed cluster's Kustomization, whose
// FleetCluster is still gone, is set to Flux's deletionPolicy Orphan, then deleted, so that
// kustomize-controller leaves what it applied on the member.
func (r *FleetRolloutReconciler) orphanDeparted(ctx context.Context, p *pass) error {
	fr := p.Rollout
	for _, o := range fr.Status.Orphaned {
		ks := p.Objects[o.Cluster]
		if ks == nil || p.Clusters[o.Cluster] != nil || !metav1.IsControlledBy(ks, fr) {
			continue
		}
		if err := r.hook("orphan:" + o.Cluster); err != nil {
			return err
		}
		if err := setDeletionPolicy(ctx, r.Client, ks, v1alpha1.DeletionPolicyOrphan); err != nil {
			return err
		}
		uid := ks.GetUID()
		if err := r.Delete(ctx, ks, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s/%s of fleetrollout %s, whose FleetCluster %s is gone: %w",
				strings.ToLower(engine.MemberKind(fr)), ks.GetNamespace(), ks.GetName(), fr.Name, o.Cluster, err)
		}
		delete(p.Objects, o.Cluster)
		r.event(fr, corev1.EventTypeNormal, "Orphaned", "FleetCluster %s is gone: its %s, at %s, was orphaned; the member keeps running it, managed by nothing",
			o.Cluster, engine.MemberKind(fr), o.Revision)
	}
	return nil
}
