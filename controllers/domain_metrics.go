package controllers

import (
	"sync"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// domainMetrics are tidegate's own metrics, beside Flux's gotk_* ones: what a platform team alerts
// on (docs/operations.md, "Metrics and alerts"). Counters count what happened; the state of each
// rollout is a set of gauges written from its status at the end of every reconcile, times as Unix
// timestamps so that a query computes how long (time() - x) without a reconcile to move it.
type domainMetrics struct {
	gateDecisions   *prometheus.CounterVec
	evidenceSeconds *prometheus.HistogramVec
	evidenceErrors  *prometheus.CounterVec
	rollbacks       *prometheus.CounterVec
	phase           *prometheus.GaugeVec
	heldSince       *prometheus.GaugeVec
	waitingSince    *prometheus.GaugeVec
	wavePhase       *prometheus.GaugeVec
	waveStart       *prometheus.GaugeVec
	waveDuration    *prometheus.GaugeVec
	reachable       *prometheus.GaugeVec
}

// The label names of the per-object series.
var (
	rolloutLabels = []string{"namespace", "name"}
	waveLabels    = []string{"namespace", "name", "wave"}
)

// rolloutPhases are the phases tidegate_rollout_phase has a series for (1 for the current one).
var rolloutPhases = []string{
	v1alpha1.PhaseIdle, v1alpha1.PhaseProgressing, v1alpha1.PhaseHeld, v1alpha1.PhaseCompleted,
	v1alpha1.PhaseRollingBack, v1alpha1.PhaseRolledBack,
}

// wavePhases are the phases tidegate_wave_phase has a series for.
var wavePhases = []string{
	v1alpha1.WavePending, v1alpha1.WaveProgressing, v1alpha1.WaveRehearsing, v1alpha1.WaveSoaking,
	v1alpha1.WaveAwaiting, v1alpha1.WaveSucceeded, v1alpha1.WaveFailed, v1alpha1.WaveRolledBack,
	v1alpha1.WaveSkipped,
}

// domain registers the metrics once per process: the registry is global, and tests start several
// managers in one process.
var domain = sync.OnceValue(func() *domainMetrics {
	m := &domainMetrics{
		gateDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidegate_gate_decisions_total",
			Help: "Gate decisions recorded in a new GateReceipt, by rollout, gate and result (Pass, Fail, Inconclusive).",
		}, []string{"namespace", "name", "gate", "result"}),
		evidenceSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidegate_evidence_collection_duration_seconds",
			Help:    "How long collecting a gate's evidence took, by gate.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"gate"}),
		evidenceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidegate_evidence_collection_errors_total",
			Help: "Evidence collections that failed (the gate then fails closed or is inconclusive), by gate.",
		}, []string{"gate"}),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidegate_rollbacks_total",
			Help: "Rollbacks started (the rollout entered RollingBack), by rollout.",
		}, rolloutLabels),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidegate_rollout_phase",
			Help: "1 for the rollout's current phase (status.phase), 0 for the others.",
		}, []string{"namespace", "name", "phase"}),
		heldSince: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidegate_rollout_held_since_timestamp_seconds",
			Help: "When the rollout's Held condition became True (Unix time); absent while it is not held.",
		}, []string{"namespace", "name", "reason"}),
		waitingSince: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidegate_rollout_waiting_since_timestamp_seconds",
			Help: "Since when the rollout waits, and for what (status.waitingFor: Approval, Soak, MembersReady, ...); absent when it waits for nothing.",
		}, []string{"namespace", "name", "reason", "wave"}),
		wavePhase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidegate_wave_phase",
			Help: "1 for each wave's current phase, 0 for the others.",
		}, []string{"namespace", "name", "wave", "phase"}),
		waveStart: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidegate_wave_start_timestamp_seconds",
			Help: "When the wave started (Unix time); absent before it does.",
		}, waveLabels),
		waveDuration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidegate_wave_duration_seconds",
			Help: "How long the wave took, from its start to its end (status.waves[].finishedAt); absent before it ends.",
		}, waveLabels),
		reachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidegate_fleetcluster_reachable",
			Help: "1 when the member cluster's API server answered its last probe (Reachable=True), else 0.",
		}, rolloutLabels),
	}
	ctrlmetrics.Registry.MustRegister(m.collectors()...)
	return m
})

// collectors are every metric of m, as registered.
func (m *domainMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.gateDecisions, m.evidenceSeconds, m.evidenceErrors, m.rollbacks, m.phase,
		m.heldSince, m.waitingSince, m.wavePhase, m.waveStart, m.waveDuration, m.reachable}
}

// recordRollout writes fr's gauges from its status, and counts a rollback when the reconcile took it
// from another phase into RollingBack (wasPhase is the phase it started from).
func (m *domainMetrics) recordRollout(fr *v1alpha1.FleetRollout, wasPhase string) {
	ns, name := fr.Namespace, fr.Name
	st := &fr.Status
	if st.Phase == v1alpha1.PhaseRollingBack && wasPhase != v1alpha1.PhaseRollingBack {
		m.rollbacks.WithLabelValues(ns, name).Inc()
	}
	for _, p := range rolloutPhases {
		m.phase.WithLabelValues(ns, name, p).Set(boolValue(st.Phase == p))
	}
	// The series of a state that ended go; the current one is written again.
	m.heldSince.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
	if c := conditions.Get(fr, v1alpha1.HeldCondition); c != nil && c.Status == metav1.ConditionTrue {
		m.heldSince.WithLabelValues(ns, name, c.Reason).Set(unix(c.LastTransitionTime))
	}
	m.waitingSince.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
	if w := st.WaitingFor; w != nil && w.Since != nil {
		m.waitingSince.WithLabelValues(ns, name, w.Reason, w.Wave).Set(unix(*w.Since))
	}
	m.wavePhase.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
	m.waveStart.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
	m.waveDuration.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
	for _, wv := range st.Waves {
		for _, p := range wavePhases {
			m.wavePhase.WithLabelValues(ns, name, wv.Name, p).Set(boolValue(wv.Phase == p))
		}
		if wv.StartedAt != nil {
			m.waveStart.WithLabelValues(ns, name, wv.Name).Set(unix(*wv.StartedAt))
			if wv.FinishedAt != nil {
				m.waveDuration.WithLabelValues(ns, name, wv.Name).Set(wv.FinishedAt.Sub(wv.StartedAt.Time).Seconds())
			}
		}
	}
}

// forgetRollout removes every series of a rollout that is gone.
func (m *domainMetrics) forgetRollout(ns, name string) {
	l := prometheus.Labels{"namespace": ns, "name": name}
	for _, v := range []*prometheus.GaugeVec{m.phase, m.heldSince, m.waitingSince, m.wavePhase, m.waveStart, m.waveDuration} {
		v.DeletePartialMatch(l)
	}
	m.rollbacks.DeletePartialMatch(l)
	m.gateDecisions.DeletePartialMatch(l)
}

// recordCluster writes a FleetCluster's reachability.
func (m *domainMetrics) recordCluster(fc *v1alpha1.FleetCluster) {
	m.reachable.WithLabelValues(fc.Namespace, fc.Name).Set(boolValue(conditions.IsTrue(fc, v1alpha1.ReachableCondition)))
}

func (m *domainMetrics) forgetCluster(ns, name string) {
	m.reachable.DeleteLabelValues(ns, name)
}

// recordEvidence observes one evidence collection of gate.
func (m *domainMetrics) recordEvidence(gate string, took time.Duration, err error) {
	m.evidenceSeconds.WithLabelValues(gate).Observe(took.Seconds())
	if err != nil {
		m.evidenceErrors.WithLabelValues(gate).Inc()
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unix(t metav1.Time) float64 { return float64(t.UnixNano()) / 1e9 }
