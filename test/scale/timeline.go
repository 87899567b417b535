package scale

import (
	"context"
	"fmt"
	"sync"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/scheme"
)

// ksState is what one write of a per-cluster Kustomization left, as the bench's watch saw it.
type ksState struct {
	at                     time.Time
	generation, observed   int64
	source                 string
	ready, healthy, reason string
	applied                string
}

// rolloutState is a FleetRollout's status as the watch saw it.
type rolloutState struct {
	at     time.Time
	status v1alpha1.FleetRolloutStatus
	hold   bool
}

// timeline records, from the bench's own watch, every change of the rollout's Kustomizations and of
// the FleetRollout, with the time it was seen. Its reads are not the controller's: the hub's audit
// log counts only the controller user.
type timeline struct {
	mu       sync.Mutex
	ks       map[string][]ksState // by cluster
	rollouts []rolloutState
	cancel   context.CancelFunc
}

func startTimeline(ctx context.Context, cfg *rest.Config, ns string) (*timeline, error) {
	managed, err := labels.NewRequirement(v1alpha1.RolloutLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	c, err := cache.New(cfg, cache.Options{
		Scheme:            scheme.New(),
		DefaultNamespaces: map[string]cache.Config{ns: {}},
		DefaultTransform:  cache.TransformStripManagedFields(),
		ByObject:          map[client.Object]cache.ByObject{&kustomizev1.Kustomization{}: {Label: labels.NewSelector().Add(*managed)}},
	})
	if err != nil {
		return nil, err
	}
	t := &timeline{ks: map[string][]ksState{}}
	ctx, t.cancel = context.WithCancel(ctx)
	for _, obj := range []client.Object{&kustomizev1.Kustomization{}, &v1alpha1.FleetRollout{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			t.cancel()
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { t.record(o) },
			UpdateFunc: func(_, o any) { t.record(o) },
		}); err != nil {
			t.cancel()
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !c.WaitForCacheSync(syncCtx) {
		t.cancel()
		return nil, fmt.Errorf("the bench's watch of the hub did not sync")
	}
	return t, nil
}

func (t *timeline) stop() { t.cancel() }

func (t *timeline) record(o any) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	switch obj := o.(type) {
	case *kustomizev1.Kustomization:
		cluster := obj.Labels[v1alpha1.ClusterLabel]
		s := ksState{at: now, generation: obj.Generation, observed: obj.Status.ObservedGeneration,
			source: obj.Spec.SourceRef.Name, applied: obj.Status.LastAppliedRevision}
		if c := conditions.Get(obj, meta.ReadyCondition); c != nil {
			s.ready, s.reason = string(c.Status), c.Reason
		}
		if c := conditions.Get(obj, meta.HealthyCondition); c != nil {
			s.healthy = string(c.Status)
		}
		t.ks[cluster] = append(t.ks[cluster], s)
	case *v1alpha1.FleetRollout:
		t.rollouts = append(t.rollouts, rolloutState{at: now, status: *obj.Status.DeepCopy(), hold: obj.Spec.Hold != nil})
	}
}

// switchedAt is when the cluster's Kustomization first pointed at source after from, having pointed
// elsewhere (or not existed) before.
func (t *timeline) switchedAt(cluster, source string, from time.Time) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	prev := ""
	for _, s := range t.ks[cluster] {
		if !s.at.Before(from) && s.source == source && prev != source {
			return s.at, true
		}
		prev = s.source
	}
	return time.Time{}, false
}

// readyAt is when the cluster's Kustomization was first Ready at revision from source, for its
// current generation, after from.
func (t *timeline) readyAt(cluster, source, revision string, from time.Time) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.ks[cluster] {
		if !s.at.Before(from) && s.source == source && s.ready == string(metav1.ConditionTrue) &&
			s.observed == s.generation && engine.SameRevision(s.applied, revision) {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// failedAt is when the cluster's Kustomization first reported a failure at source after from.
func (t *timeline) failedAt(cluster, source string, from time.Time) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.ks[cluster] {
		if !s.at.Before(from) && s.source == source && s.ready == string(metav1.ConditionFalse) && s.reason == meta.HealthCheckFailedReason {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// transientAt counts the clusters whose Kustomization was in a re-reconcile of what it had applied
// at time at: Ready or Healthy Unknown with its generation observed (not a new spec being applied).
func (t *timeline) transientAt(at time.Time, clusters []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range clusters {
		var last *ksState
		for i := range t.ks[c] {
			if t.ks[c][i].at.After(at) {
				break
			}
			last = &t.ks[c][i]
		}
		if last != nil && last.applied != "" && last.observed == last.generation && (last.ready == string(metav1.ConditionUnknown) || last.healthy == string(metav1.ConditionUnknown)) {
			n++
		}
	}
	return n
}

// rolloutWhen is the first status after from that cond accepts.
func (t *timeline) rolloutWhen(from time.Time, cond func(rolloutState) bool) (rolloutState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.rollouts {
		if !r.at.Before(from) && cond(r) {
			return r, true
		}
	}
	return rolloutState{}, false
}

// decisions counts the decisions of gate on wave that status recorded in [from, to): the distinct
// decidedAt times of its outcome. A decision that stands (the same Inconclusive) writes no receipt,
// but moves decidedAt.
func (t *timeline) decisions(wave, gate string, from, to time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[time.Time]bool{}
	for _, r := range t.rollouts {
		for _, wv := range r.status.Waves {
			if wv.Name != wave {
				continue
			}
			for _, g := range wv.Gates {
				if g.Gate != gate || g.DecidedAt == nil {
					continue
				}
				if at := g.DecidedAt.Time; !at.Before(from) && at.Before(to) {
					seen[at] = true
				}
			}
		}
	}
	return len(seen)
}

// latest is the last status seen.
func (t *timeline) latest() (rolloutState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.rollouts) == 0 {
		return rolloutState{}, false
	}
	return t.rollouts[len(t.rollouts)-1], true
}

// wait polls cond on the latest status until it holds or ctx ends.
func (t *timeline) wait(ctx context.Context, what string, cond func(rolloutState) bool) (rolloutState, error) {
	for {
		if r, ok := t.latest(); ok && cond(r) {
			return r, nil
		}
		select {
		case <-ctx.Done():
			r, _ := t.latest()
			return r, fmt.Errorf("waiting for %s: %w; last status: %s", what, ctx.Err(), describe(r.status))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// describe is a one-line summary of a rollout's status.
func describe(st v1alpha1.FleetRolloutStatus) string {
	s := fmt.Sprintf("phase=%s wave=%s", st.Phase, st.CurrentWave)
	if st.Candidate != nil {
		s += " candidate=" + st.Candidate.Revision
	}
	for _, w := range st.Waves {
		s += fmt.Sprintf(" [%s %s %d/%d/%d]", w.Name, w.Phase, len(w.Clusters), w.Updated, w.Healthy)
	}
	if wf := st.WaitingFor; wf != nil {
		s += fmt.Sprintf(" waitingFor=%s(%s): %s", wf.Reason, wf.Wave, wf.Message)
	}
	for _, c := range st.Conditions {
		if c.Status != metav1.ConditionTrue || c.Type == meta.ReadyCondition {
			s += fmt.Sprintf(" {%s=%s %s: %.200s}", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return s
}
