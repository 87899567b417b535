package scale

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// deadAddress is where the away cluster's kubeconfig points while it is away: nothing listens there,
// so every request to it fails at once and reaches no API server.
const deadAddress = "https://127.0.0.1:1"

// OneAway is a release made while one cluster of the last wave does not answer: the last wave's
// deploySafe is Inconclusive about it and decided again while it waits. What those decisions cost
// the members is counted over Window, from the wave's first decision; then the cluster answers again
// and the release completes.
type OneAway struct {
	Release *Release
	// Cluster is the cluster away, Wave the wave that waited on it, WaveMembers that wave's members.
	Cluster, Wave string
	WaveMembers   int
	// Window is how long the wave waited, counted; Decisions the wave's deploySafe decisions in it
	// (status's decidedAt: a decision that stands writes no receipt), the first excluded; DryRuns
	// the controller's dry-runs on members in it, the first decision's excluded.
	Window    time.Duration
	Decisions int
	DryRuns   int
}

// awaySecret is the kubeconfig Secret of the one cluster that has a Secret of its own, so that it
// can be taken away without a change to its FleetCluster (which would be a change of credentials
// to catch up).
func awaySecret(cluster string) string { return cluster + "-kubeconfig" }

// ReleaseWithOneAway takes the away cluster (the last FleetCluster, planned into the last wave)
// away, commits version, and lets the last wave wait on it for window once its deploySafe was first
// decided; then the cluster comes back and the release runs to its end.
func (h *Harness) ReleaseWithOneAway(ctx context.Context, version string, window time.Duration) (*OneAway, error) {
	away := &OneAway{Release: &Release{Name: "release " + version + " with one cluster away"}, Cluster: h.away, Window: window}
	restore, err := h.takeAway(ctx)
	if err != nil {
		return away, err
	}
	defer func() { _ = restore(context.WithoutCancel(ctx)) }()
	err = h.play(ctx, away.Release, func() error {
		rev, err := h.commit(version)
		away.Release.Revision = rev
		return err
	}, func(ctx context.Context) error {
		waiting, err := h.tl.wait(ctx, "the last wave to wait on "+h.away, func(r rolloutState) bool {
			st := r.status
			return st.Candidate != nil && st.Candidate.Revision == away.Release.Revision && len(st.Waves) > 0 &&
				st.CurrentWave == st.Waves[len(st.Waves)-1].Name &&
				st.WaitingFor != nil && st.WaitingFor.Reason == v1alpha1.WaitingForInconclusive
		})
		if err != nil {
			return err
		}
		last := waiting.status.Waves[len(waiting.status.Waves)-1]
		away.Wave, away.WaveMembers = last.Name, len(last.Clusters)
		if !slices.Contains(last.Clusters, h.away) {
			return fmt.Errorf("wave %s waits, and %s is not one of its members %v", last.Name, h.away, last.Clusters)
		}
		first, err := h.firstDecision(ctx, away.Release.Revision, last.Name)
		if err != nil {
			return err
		}
		if err := sleep(ctx, time.Until(first.Add(window))); err != nil {
			return err
		}
		if err := h.audit.sync(); err != nil {
			return err
		}
		from, to := first.Add(time.Second), first.Add(window)
		away.DryRuns = countRequests(h.audit.Members(from, to), func(r Request) bool { return r.DryRun }).Total()
		away.Decisions = h.tl.decisions(last.Name, v1alpha1.GateDeploySafe, from, to)
		h.cfg.Logf("%s: wave %s waited on %s; in %s after its first decision: %d more decisions, %d member dry-runs",
			away.Release.Name, last.Name, h.away, window, away.Decisions, away.DryRuns)
		return restore(ctx)
	})
	return away, err
}

// takeAway points the away cluster's kubeconfig at an address nothing listens on, and waits for
// its probe to say so; restore puts it back.
func (h *Harness) takeAway(ctx context.Context) (restore func(context.Context) error, err error) {
	key := types.NamespacedName{Namespace: h.fleet.Namespace, Name: awaySecret(h.away)}
	var s corev1.Secret
	if err := h.hub.Get(ctx, key, &s); err != nil {
		return nil, err
	}
	kept := s.Data["value"]
	kc, err := clientcmd.Load(kept)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig of %s: %w", h.away, err)
	}
	for _, c := range kc.Clusters {
		c.Server = deadAddress
	}
	dead, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, err
	}
	write := func(ctx context.Context, value []byte) error {
		var s corev1.Secret
		if err := h.hub.Get(ctx, key, &s); err != nil {
			return err
		}
		s.Data["value"] = value
		return h.hub.Update(ctx, &s)
	}
	if err := write(ctx, dead); err != nil {
		return nil, err
	}
	restored := false
	restore = func(ctx context.Context) error {
		if restored {
			return nil
		}
		restored = true
		return write(ctx, kept)
	}
	h.cfg.Logf("%s: kubeconfig pointed at %s", h.away, deadAddress)
	return restore, h.waitReachable(ctx, h.away, false)
}

// waitReachable waits for the FleetCluster's Reachable condition to be reachable.
func (h *Harness) waitReachable(ctx context.Context, name string, reachable bool) error {
	for {
		var fc v1alpha1.FleetCluster
		if err := h.hub.Get(ctx, types.NamespacedName{Namespace: h.fleet.Namespace, Name: name}, &fc); err != nil {
			return err
		}
		if conditionTrue(fc.Status.Conditions, v1alpha1.ReachableCondition) == reachable {
			return nil
		}
		if err := sleep(ctx, time.Second); err != nil {
			return fmt.Errorf("FleetCluster %s never became Reachable=%v: %w", name, reachable, err)
		}
	}
}

// firstDecision is when the wave's first deploySafe receipt of revision was evaluated.
func (h *Harness) firstDecision(ctx context.Context, revision, wave string) (time.Time, error) {
	receipts, err := h.deploySafeReceipts(ctx, revision, wave)
	if err != nil || len(receipts) == 0 {
		return time.Time{}, fmt.Errorf("no deploySafe receipt of wave %s: %v", wave, err)
	}
	first := receipts[0].Spec.EvaluatedAt.Time
	for _, rc := range receipts[1:] {
		if rc.Spec.EvaluatedAt.Time.Before(first) {
			first = rc.Spec.EvaluatedAt.Time
		}
	}
	return first, nil
}

func (h *Harness) deploySafeReceipts(ctx context.Context, revision, wave string) ([]v1alpha1.GateReceipt, error) {
	var list v1alpha1.GateReceiptList
	if err := h.hub.List(ctx, &list, client.InNamespace(h.fleet.Namespace), client.MatchingLabels{v1alpha1.RolloutLabel: RolloutName}); err != nil {
		return nil, err
	}
	var out []v1alpha1.GateReceipt
	for _, rc := range list.Items {
		if rc.Spec.Gate == v1alpha1.GateDeploySafe && rc.Spec.Wave == wave && rc.Spec.Candidate.Revision == revision {
			out = append(out, rc)
		}
	}
	return out, nil
}
