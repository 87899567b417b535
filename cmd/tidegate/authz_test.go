package main

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// waitAuthorized waits until the hub's authorizer answers want to user (of groups) asking for a.
// The API server's RBAC authorizer reads roles and bindings from its informers, a moment after
// they are written: a test that has just changed them waits here before it relies on them.
func waitAuthorized(ctx context.Context, t *testing.T, user string, groups []string, a authorizationv1.ResourceAttributes, want bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &a}}
		if err := k8s.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed == want, nil
	})
	if err != nil {
		t.Fatalf("the hub's RBAC never answered %v to %s asking to %s: %v", want, user, describeAccess(a), err)
	}
}
