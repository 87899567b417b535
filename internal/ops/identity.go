package ops

import (
	"context"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Identity is who the API server authenticates a client as.
type Identity struct {
	User   string   `json:"user"`
	Groups []string `json:"groups,omitempty"`
}

// WhoAmI asks the API server who c authenticates as (a SelfSubjectReview, as kubectl auth whoami
// does): the user an approval is recorded as written by, and the scope the MCP server reports.
func WhoAmI(ctx context.Context, c client.Client) (Identity, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return Identity{}, AsError(err, Ref{Kind: "selfsubjectreview"})
	}
	return Identity{User: review.Status.UserInfo.Username, Groups: review.Status.UserInfo.Groups}, nil
}

// ApproveAs is Approve with the approval recorded as written by the user c authenticates as, and
// given now (approvedAt); when the API server cannot say who (it serves no SelfSubjectReview), the
// approval is written without it and the change's warning says so (where the admission policies of
// config/admission are installed, the API server then refuses it).
func ApproveAs(ctx context.Context, c client.Client, a v1alpha1.Approval) Mutation {
	warning := ""
	if id, err := WhoAmI(ctx, c); err != nil {
		warning = "warning: the approval does not record who wrote it: " + err.Error()
	} else {
		a.AuthenticatedAs = id.User
	}
	a.ApprovedAt = &metav1.Time{Time: time.Now().UTC().Truncate(time.Second)}
	approve := Approve(a)
	return func(fr *v1alpha1.FleetRollout) (Change, error) {
		ch, err := approve(fr)
		if err == nil && warning != "" {
			ch.Warning = warning
		}
		return ch, err
	}
}
