package availability

import (
	"context"
	"fmt"
	"sync"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/runtime/cel"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// HealthCheck is how a Workload of a kind other than the apps kinds is judged: the health check
// expressions of the Kustomization (spec.healthCheckExprs, which tidegate copies from the rollout's
// template) that match its kind.
//
// They are evaluated as kustomize-controller evaluates them in its health checks, with the same
// library (fluxcd/pkg/runtime/cel's StatusEvaluator, RFC 0009): a status.observedGeneration that is
// not metadata.generation is InProgress; then inProgress, failed and current are tried in that order
// and the first that is true decides; none true is InProgress. The sampler reads kstatus's answer
// as availability: Current is available (ratio 1); InProgress and Failed are not (ratio 0), since
// a custom resource says nothing finer than that. An expression that does not parse or cannot be
// evaluated on the object (a field it needs is absent, it is not a boolean) is a failed read, as
// kustomize-controller makes it an Unknown status: nothing was seen.
type HealthCheck struct {
	kustomize.HealthCheckExpressions
	// Invalid says why kustomize-controller refuses the Kustomization's expressions as a whole (two
	// entries for one kind): every read of an object they would judge fails with it.
	Invalid string
}

// healthChecks matches objects to a Kustomization's health check expressions.
type healthChecks struct {
	checks []kustomize.CustomHealthCheck
	// judged holds one HealthCheck per entry of checks, shared by the Workloads it judges.
	judged  []*HealthCheck
	invalid string
}

func newHealthChecks(checks []kustomize.CustomHealthCheck) *healthChecks {
	h := &healthChecks{checks: checks, judged: make([]*HealthCheck, len(checks))}
	keys := make(map[schema.GroupKind]int, len(checks))
	for i, c := range checks {
		k := checkKey(c)
		if j, ok := keys[k]; ok && h.invalid == "" {
			h.invalid = fmt.Sprintf("healthCheckExprs[%d] and healthCheckExprs[%d] are both for %s: kustomize-controller refuses the list", j, i, describeKey(k))
		}
		keys[k] = i
	}
	for i := range checks {
		h.judged[i] = &HealthCheck{HealthCheckExpressions: checks[i].HealthCheckExpressions, Invalid: h.invalid}
	}
	return h
}

// checkKey is what an entry of healthCheckExprs applies to, as fluxcd/pkg/runtime/cel's
// NewStatusReader keys it: its group and kind, or its group alone when it names no kind.
func checkKey(c kustomize.CustomHealthCheck) schema.GroupKind {
	gk := schema.FromAPIVersionAndKind(c.APIVersion, c.Kind).GroupKind()
	if c.Kind == "" {
		return schema.GroupKind{Group: gk.Group}
	}
	return gk
}

func describeKey(k schema.GroupKind) string {
	if k.Kind == "" {
		return fmt.Sprintf("every kind of group %q", k.Group)
	}
	return k.String()
}

// For is the HealthCheck that judges objects of gk: the entry for the kind, else the entry for its
// whole group, as fluxcd/pkg/runtime/cel's StatusReader picks one; nil when none matches, and for
// the apps kinds the Sampler reads by their replicas (an expression for them is left to
// kustomize-controller: availability is a count of replicas, finer than Current or not).
func (h *healthChecks) For(gk schema.GroupKind) *HealthCheck {
	if len(h.checks) == 0 || isAppsWorkload(gk) {
		return nil
	}
	group := -1
	for i, c := range h.checks {
		switch k := checkKey(c); {
		case k == gk:
			return h.judged[i]
		case k.Kind == "" && k.Group == gk.Group && group < 0:
			group = i
		}
	}
	if group >= 0 {
		return h.judged[group]
	}
	return nil
}

// Sampled says which kinds the Sampler reads of a Kustomization whose spec.healthCheckExprs are
// checks (WorkloadsFromInventory): Deployments, StatefulSets and DaemonSets, and the kinds the
// expressions judge. An inventory kept for sampling needs the entries of these kinds and no others.
func Sampled(checks ...kustomize.CustomHealthCheck) func(schema.GroupKind) bool {
	h := newHealthChecks(checks)
	return func(gk schema.GroupKind) bool { return isAppsWorkload(gk) || h.For(gk) != nil }
}

func isAppsWorkload(gk schema.GroupKind) bool {
	if gk.Group != appsv1.GroupName {
		return false
	}
	switch gk.Kind {
	case KindDeployment, KindStatefulSet, KindDaemonSet:
		return true
	}
	return false
}

// maxEvaluators bounds the compiled expression sets a Sampler keeps: each rollout has one per kind
// it judges, and compiling one takes a millisecond or two, too much to do for every read.
const maxEvaluators = 256

// evaluators compiles health check expressions once and keeps them, for concurrent use.
type evaluators struct {
	mu sync.Mutex
	m  map[kustomize.HealthCheckExpressions]compiled
}

type compiled struct {
	eval *cel.StatusEvaluator
	err  error
}

// get returns the evaluator of e, compiled by fluxcd/pkg/runtime/cel as kustomize-controller
// compiles it. A nil v compiles every time.
func (v *evaluators) get(e kustomize.HealthCheckExpressions) (*cel.StatusEvaluator, error) {
	if v == nil {
		return cel.NewStatusEvaluator(&e)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.m[e]; ok {
		return c.eval, c.err
	}
	if v.m == nil || len(v.m) >= maxEvaluators {
		v.m = map[kustomize.HealthCheckExpressions]compiled{}
	}
	eval, err := cel.NewStatusEvaluator(&e)
	v.m[e] = compiled{eval, err}
	return eval, err
}

// judge reads what w's health check expressions say of u. It is read's measure for a Workload
// with a HealthCheck, the object read already.
func judge(ctx context.Context, eval *cel.StatusEvaluator, u *unstructured.Unstructured, cluster string, w Workload) reading {
	res, err := eval.Evaluate(ctx, u)
	if err != nil {
		return reading{failed: true, err: fmt.Errorf("judging %s on cluster %s by its health check expressions: %w", w, cluster, err)}
	}
	if res.Status == status.CurrentStatus {
		return reading{available: 1, desired: 1}
	}
	return reading{available: 0, desired: 1}
}
