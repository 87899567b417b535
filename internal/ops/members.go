package ops

import (
	"context"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
)

// ListMembers lists the members of rollout fr's kind (engine.MemberKind: HelmReleases for a chart,
// else Kustomizations) that opts select. HelmReleases are listed for a chart rollout only: a hub
// without helm-controller's CRD answers a list of them with no match, and a chart rollout there
// has written none (its status says to install helm-controller), so it has no members; a kustomize
// rollout's hub must serve Kustomizations, and one that does not is an error.
func ListMembers(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, opts ...client.ListOption) ([]engine.Object, error) {
	list := engine.NewMemberList(fr)
	if err := c.List(ctx, list, opts...); err != nil {
		if fr.IsChart() && apimeta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, err
	}
	return engine.MemberItems(list), nil
}

// memberController is the Flux controller that reconciles members of kind (engine.MemberKind),
// as messages name it.
func memberController(kind string) string {
	if kind == helmv2.HelmReleaseKind {
		return "helm-controller"
	}
	return "kustomize-controller"
}

// memberReady is a member's Ready condition, nil when it has none.
func memberReady(obj client.Object) *metav1.Condition {
	if g, ok := obj.(interface{ GetConditions() []metav1.Condition }); ok {
		return apimeta.FindStatusCondition(g.GetConditions(), meta.ReadyCondition)
	}
	return nil
}
