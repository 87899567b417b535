package ops

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
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

// ApproveAs is Approve with the approval recorded as written by the user c authenticates as; when
// the API server cannot say (it serves no SelfSubjectReview), the approval is written without it and
// the change's warning says so.
func ApproveAs(ctx context.Context, c client.Client, a v1alpha1.Approval) Mutation {
	warning := ""
	if id, err := WhoAmI(ctx, c); err != nil {
		warning = "warning: the approval does not record who wrote it: " + err.Error()
	} else {
		a.AuthenticatedAs = id.User
	}
	approve := Approve(a)
	return func(fr *v1alpha1.FleetRollout) (Change, error) {
		ch, err := approve(fr)
		if err == nil && warning != "" {
			ch.Warning = warning
		}
		return ch, err
	}
}
