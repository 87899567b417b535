package controllers

import (
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// A rollout's gauges follow its status; a rollback counts once however many reconciles see it
// rolling back; a rollout that is gone leaves no series.
func TestDomainMetricsFollowTheStatus(t *testing.T) {
	m := domain()
	started := metav1.NewTime(time.Unix(1000, 0))
	finished := metav1.NewTime(time.Unix(1090, 0))
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Namespace: "metrics-test", Name: "web"}}
	fr.Status.Phase = v1alpha1.PhaseProgressing
	fr.Status.Waves = []v1alpha1.WaveStatus{
		{Name: "canary", Phase: v1alpha1.WaveSucceeded, StartedAt: &started, FinishedAt: &finished},
		{Name: "rest", Phase: v1alpha1.WaveSoaking, StartedAt: &finished},
	}
	fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForSoak, Wave: "rest", Since: &finished}
	m.recordRollout(fr, v1alpha1.PhaseIdle)

	if v := testutil.ToFloat64(m.phase.WithLabelValues("metrics-test", "web", v1alpha1.PhaseProgressing)); v != 1 {
		t.Errorf("phase Progressing = %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.phase.WithLabelValues("metrics-test", "web", v1alpha1.PhaseCompleted)); v != 0 {
		t.Errorf("phase Completed = %v, want 0", v)
	}
	if v := testutil.ToFloat64(m.waveDuration.WithLabelValues("metrics-test", "web", "canary")); v != 90 {
		t.Errorf("canary's duration = %v, want 90", v)
	}
	if v := testutil.ToFloat64(m.waitingSince.WithLabelValues("metrics-test", "web", v1alpha1.WaitingForSoak, "rest")); v != 1090 {
		t.Errorf("waiting since = %v, want 1090", v)
	}
	if n := testutil.CollectAndCount(m.waveDuration, "tidegate_wave_duration_seconds"); n != 1 {
		t.Errorf("%d wave durations, want only the finished canary's", n)
	}

	// It fails and rolls back: the rollback counts once, the wait for the soak is gone, the hold shows.
	fr.Status.Phase = v1alpha1.PhaseRollingBack
	fr.Status.WaitingFor = nil
	conditions.Set(fr, &metav1.Condition{Type: v1alpha1.HeldCondition, Status: metav1.ConditionTrue, Reason: "GateFailed", LastTransitionTime: finished})
	m.recordRollout(fr, v1alpha1.PhaseProgressing)
	m.recordRollout(fr, v1alpha1.PhaseRollingBack)
	if v := testutil.ToFloat64(m.rollbacks.WithLabelValues("metrics-test", "web")); v != 1 {
		t.Errorf("rollbacks = %v, want 1", v)
	}
	if n := testutil.CollectAndCount(m.waitingSince, "tidegate_rollout_waiting_since_timestamp_seconds"); n != 0 {
		t.Errorf("%d waiting series after the wait ended, want 0", n)
	}
	if v := testutil.ToFloat64(m.heldSince.WithLabelValues("metrics-test", "web", "GateFailed")); v != 1090 {
		t.Errorf("held since = %v, want 1090", v)
	}

	m.forgetRollout("metrics-test", "web")
	if n := testutil.CollectAndCount(m.phase) + testutil.CollectAndCount(m.rollbacks) + testutil.CollectAndCount(m.heldSince) + testutil.CollectAndCount(m.wavePhase); n != 0 {
		t.Errorf("%d series left of a rollout that is gone", n)
	}
}
