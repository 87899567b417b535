package preflight

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/tidegate/tidegate/verdict"
)

// checkObjects is Check of t, reached through cfg, for its own objects when it has them
// (Target.Objects), else for objs. Objects that cannot be made are a dry-run error: nothing was
// dry-run, and reachability and the server version are still checked.
func checkObjects(ctx context.Context, t Target, cfg *rest.Config, objs []*unstructured.Unstructured, opts Options) verdict.ClusterPreflight {
	if t.Objects == nil {
		return Check(ctx, t.Name, cfg, objs, opts)
	}
	own, err := t.Objects()
	if err != nil {
		r := Check(ctx, t.Name, cfg, nil, opts)
		if r.Reachable {
			r.DryRunErrors = append(r.DryRunErrors, err.Error())
		}
		return r
	}
	return Check(ctx, t.Name, cfg, own, opts)
}
