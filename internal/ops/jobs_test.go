package ops

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

func TestStatusOf(t *testing.T) {
	job := Job{Rollout: RolloutRef("ns", "web"), UID: "u1", Generation: 3}
	rollout := func(edit func(*v1alpha1.FleetRollout)) *v1alpha1.FleetRollout {
		fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1", Generation: 3}}
		fr.Status.ObservedGeneration, fr.Status.Phase = 3, v1alpha1.PhaseProgressing
		edit(fr)
		return fr
	}
	for _, tc := range []struct {
		name string
		job  Job
		fr   *v1alpha1.FleetRollout
		want string
	}{
		{"deleted", job, nil, JobGone},
		{"replaced under the same name", job, rollout(func(fr *v1alpha1.FleetRollout) { fr.UID = "u2" }), JobGone},
		{"not observed yet", job, rollout(func(fr *v1alpha1.FleetRollout) { fr.Status.ObservedGeneration = 2 }), JobPending},
		{"reconcile request not handled", Job{Rollout: job.Rollout, UID: "u1", Generation: 3, ReconcileRequest: "r1"}, rollout(func(*v1alpha1.FleetRollout) {}), JobPending},
		{"progressing", job, rollout(func(*v1alpha1.FleetRollout) {}), JobRunning},
		{"rolling back", job, rollout(func(fr *v1alpha1.FleetRollout) { fr.Status.Phase = v1alpha1.PhaseRollingBack }), JobRunning},
		{"awaiting an approval", job, rollout(func(fr *v1alpha1.FleetRollout) {
			fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForApproval, Wave: "ring"}
		}), JobAwaitingApproval},
		{"completed", job, rollout(func(fr *v1alpha1.FleetRollout) { fr.Status.Phase = v1alpha1.PhaseCompleted }), JobSettled},
		{"held", job, rollout(func(fr *v1alpha1.FleetRollout) { fr.Status.Phase = v1alpha1.PhaseHeld }), JobSettled},
		{"suspended before it was observed", job, rollout(func(fr *v1alpha1.FleetRollout) { fr.Spec.Suspend, fr.Status.ObservedGeneration = true, 1 }), JobSettled},
	} {
		if got := StatusOf(tc.job, tc.fr); got.State != tc.want {
			t.Errorf("%s: state %s, want %s", tc.name, got.State, tc.want)
		}
	}
}

func TestAsError(t *testing.T) {
	ref := RolloutRef("ns", "web")
	gr := schema.GroupResource{Group: "tidegate.dev", Resource: "fleetrollouts"}
	for _, tc := range []struct {
		err  error
		want Code
	}{
		{apierrors.NewNotFound(gr, "web"), CodeNotFound},
		{apierrors.NewForbidden(gr, "web", errors.New("no")), CodeForbidden},
		{apierrors.NewInvalid(schema.GroupKind{Group: "tidegate.dev", Kind: "FleetRollout"}, "web", nil), CodeRefused},
		{apierrors.NewConflict(gr, "web", errors.New("changed")), CodeConflict},
		{apierrors.NewServiceUnavailable("down"), CodeUnavailable},
		{errors.New("something else"), CodeInternal},
		{Errorf(CodeCannotCancel, &ref, "no"), CodeCannotCancel},
	} {
		got := AsError(tc.err, ref)
		if got.Code != tc.want || got.Object == nil || *got.Object != ref {
			t.Errorf("%v: %s about %v, want %s about %s", tc.err, got.Code, got.Object, tc.want, ref)
		}
	}
}

func TestPastDeadline(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	rate := errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want bool
	}{
		{live, rate, true},
		{live, fmt.Errorf("reading: %w", context.DeadlineExceeded), true},
		{done, errors.New("anything"), true},
		{live, errors.New("connection refused"), false},
	} {
		if got := PastDeadline(tc.ctx, tc.err); got != tc.want {
			t.Errorf("PastDeadline(%v, %q) = %v, want %v", tc.ctx.Err(), tc.err, got, tc.want)
		}
	}
}
