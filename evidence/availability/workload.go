package availability

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/fluxcd/cli-utils/pkg/object"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/evidence"
)

// The workload kinds a Sampler reads, all in API group "apps".
const (
	KindDeployment  = "Deployment"
	KindStatefulSet = "StatefulSet"
	KindDaemonSet   = "DaemonSet"
)

// Workload names one object whose availability is sampled: a Deployment, StatefulSet or DaemonSet
// (API group apps, version v1), or an object of another kind that health check expressions judge
// (Health).
type Workload struct {
	Kind      string
	Namespace string
	Name      string
	// APIVersion is the object's group and version as the inventory lists them, for an object Health
	// judges; empty for the apps kinds.
	APIVersion string
	// Health is the health check expressions that judge the object; nil for the apps kinds, which are
	// read by their replicas.
	Health *HealthCheck
}

// String is "Kind namespace/name" ("Kind name" for a cluster-scoped object), as error messages and
// limits name a workload.
func (w Workload) String() string {
	if w.Namespace == "" {
		return w.Kind + " " + w.Name
	}
	return w.Kind + " " + w.Namespace + "/" + w.Name
}

// judgedKind is "Kind.group" ("Kind" in the core group) of an object Health judges; "" for the apps
// kinds.
func (w Workload) judgedKind() string {
	if w.Health == nil {
		return ""
	}
	gv, _ := schema.ParseGroupVersion(w.APIVersion)
	return schema.GroupKind{Group: gv.Group, Kind: w.Kind}.String()
}

// reading is what one read of one workload found.
type reading struct {
	available, desired int32
	// missing: the object was not there (or was being deleted).
	missing bool
	// err is why the workload could not be read (or why it was missing); nil when it was read.
	err error
	// failed: err is a read failure or an unsupported kind, not a missing object.
	failed bool
}

// ratio is available/desired in [0, 1]: 1 when nothing is desired, 0 when the workload is missing.
// A failed read has no ratio: nothing was seen.
func (r reading) ratio() float64 {
	switch {
	case r.failed, r.missing:
		return 0
	case r.desired <= 0:
		return 1
	case r.available >= r.desired:
		return 1
	case r.available <= 0:
		return 0
	}
	return float64(r.available) / float64(r.desired)
}

// below says whether the workload was seen below its desired availability, or missing. A failed
// read saw nothing: it is not below (the Sampler counts it as unavailable for one interval).
func (r reading) below() bool { return !r.failed && (r.missing || r.available < r.desired) }

// readParallel is how many workloads of one cluster Observe reads at once.
const readParallel = 4

// readAll reads workloads from c into readings (one per workload), a few at a time, until ctx ends:
// the reads not done by then are failed reads. It does not wait for them: a client may not heed
// ctx everywhere (controller-runtime's discovery of a kind's resource does not), and a sample must
// end with its deadline. Such a read ends in the background, within the client's own timeout.
func readAll(ctx context.Context, c client.Reader, cluster string, workloads []Workload, readings []reading, evals *evaluators) {
	type result struct {
		i int
		r reading
	}
	results := make(chan result, len(workloads)) // never blocks a read that ends after readAll returned
	go evidence.Each(len(workloads), readParallel, func(i int) {
		if err := ctx.Err(); err != nil {
			results <- result{i, reading{failed: true, err: fmt.Errorf("reading %s on cluster %s: not read before the sample's deadline: %w", workloads[i], cluster, err)}}
			return
		}
		results <- result{i, read(ctx, c, cluster, workloads[i], evals)}
	})
	done := make([]bool, len(workloads))
	for range workloads {
		select {
		case res := <-results:
			readings[res.i], done[res.i] = res.r, true
		case <-ctx.Done():
			for i, ok := range done {
				if !ok {
					readings[i] = reading{failed: true, err: fmt.Errorf("reading %s on cluster %s: no answer before the sample's deadline: %w", workloads[i], cluster, ctx.Err())}
				}
			}
			return
		}
	}
}

// read reads w from c on cluster. It never returns a bare error: a failure is a reading with err
// set. A workload judged by health check expressions has them compiled by evals (nil: compiled for
// this read).
func read(ctx context.Context, c client.Reader, cluster string, w Workload, evals *evaluators) reading {
	key := client.ObjectKey{Namespace: w.Namespace, Name: w.Name}
	var (
		obj client.Object
		// measure is the reading of obj, once it is read.
		measure func() reading
	)
	switch {
	case w.Health != nil:
		if w.Health.Invalid != "" {
			return reading{failed: true, err: fmt.Errorf("judging %s on cluster %s: %s", w, cluster, w.Health.Invalid)}
		}
		eval, err := evals.get(w.Health.HealthCheckExpressions)
		if err != nil {
			return reading{failed: true, err: fmt.Errorf("judging %s on cluster %s: its health check expressions: %w", w, cluster, err)}
		}
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(w.APIVersion)
		u.SetKind(w.Kind)
		obj = u
		measure = func() reading { return judge(ctx, eval, u, cluster, w) }
	case w.Kind == KindDeployment:
		d := &appsv1.Deployment{}
		obj = d
		measure = func() reading {
			return reading{available: d.Status.AvailableReplicas, desired: replicas(d.Spec.Replicas)}
		}
	case w.Kind == KindStatefulSet:
		s := &appsv1.StatefulSet{}
		obj = s
		measure = func() reading { return reading{available: statefulSetAvailable(s), desired: replicas(s.Spec.Replicas)} }
	case w.Kind == KindDaemonSet:
		d := &appsv1.DaemonSet{}
		obj = d
		measure = func() reading {
			return reading{available: d.Status.NumberAvailable, desired: d.Status.DesiredNumberScheduled}
		}
	default:
		return reading{failed: true, err: fmt.Errorf("reading %s on cluster %s: unsupported workload kind %q (want %s, %s or %s)",
			w, cluster, w.Kind, KindDeployment, KindStatefulSet, KindDaemonSet)}
	}
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return reading{missing: true, err: fmt.Errorf("%s not found on cluster %s: %w", w, cluster, err)}
		}
		return reading{failed: true, err: fmt.Errorf("reading %s on cluster %s: %w", w, cluster, err)}
	}
	if obj.GetDeletionTimestamp() != nil {
		return reading{missing: true, err: fmt.Errorf("%s on cluster %s is being deleted", w, cluster)}
	}
	return measure()
}

// statefulSetAvailable is status.availableReplicas, or status.readyReplicas when the StatefulSet has no
// minReadySeconds and availableReplicas is 0 while pods are ready: an API server from before
// availableReplicas existed (Kubernetes < 1.22, or its feature gate off) leaves it 0, and with
// minReadySeconds 0 a ready pod is an available one.
func statefulSetAvailable(s *appsv1.StatefulSet) int32 {
	if s.Status.AvailableReplicas == 0 && s.Spec.MinReadySeconds == 0 {
		return s.Status.ReadyReplicas
	}
	return s.Status.AvailableReplicas
}

// replicas is spec.replicas with the API's default of 1.
func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

// WorkloadsFromInventory returns the Deployments, StatefulSets and DaemonSets (API group apps)
// among the entries of a Flux Kustomization's status.inventory, and the objects of the kinds its
// spec.healthCheckExprs (checks) judge, sorted and without duplicates. Entry IDs are
// "<namespace>_<name>_<group>_<kind>", parsed with fluxcd/cli-utils's object.ParseObjMetadata as
// kustomize-controller writes them; an apps workload's version is not needed (apps/v1 is the only
// served version of these kinds), a judged object is read at the entry's version. An ID that does
// not parse might be a workload, so it is an error naming the entry; the workloads that did parse
// are returned with it, for a caller that prefers a partial list to none. A nil inventory (nothing
// applied yet) has no workloads.
func WorkloadsFromInventory(inv *kustomizev1.ResourceInventory, checks ...kustomize.CustomHealthCheck) ([]Workload, error) {
	if inv == nil {
		return nil, nil
	}
	health := newHealthChecks(checks)
	seen := map[Workload]bool{}
	var (
		out  []Workload
		errs []error
	)
	for i, e := range inv.Entries {
		id, err := object.ParseObjMetadata(e.ID)
		if err != nil {
			errs = append(errs, fmt.Errorf("inventory entry %d (%q): %w", i, e.ID, err))
			continue
		}
		w := Workload{Kind: id.GroupKind.Kind, Namespace: id.Namespace, Name: id.Name}
		if hc := health.For(id.GroupKind); hc != nil {
			w.APIVersion = schema.GroupVersion{Group: id.GroupKind.Group, Version: e.Version}.String()
			w.Health = hc
		} else if !isAppsWorkload(id.GroupKind) {
			continue
		}
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.APIVersion < b.APIVersion
	})
	return out, errors.Join(errs...)
}
