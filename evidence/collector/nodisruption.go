package collector

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence/availability"
	"github.com/tidegate/tidegate/verdict"
)

// noDisruption summarises the wave's soak per cluster: the Kustomization's readiness and health
// checks at the candidate, and the workload availability sampled since the wave was Ready.
func (c *Collector) noDisruption(ctx context.Context, sc *engine.World, wv *v1alpha1.WaveStatus) verdict.NoDisruptionEvidence {
	fr, w := sc.Rollout, sc
	spec := fr.WaveSpec(wv.Name)
	soak := engine.WaveSoak(spec, w.Settings)
	cand := fr.Status.Candidate
	var since time.Time
	if wv.ReadyAt != nil {
		since = wv.ReadyAt.Time
	} else if wv.StartedAt != nil {
		since = wv.StartedAt.Time
	}
	// Coverage is measured against the time soaked so far, up to the soak: a wave decided before
	// its soak's end (a member lost readiness) is judged on what its members could have shown.
	soaked := min(soak, max(w.Now.Sub(since), 0))
	// The soak is judged at the interval it was sampled at (waveSampler).
	settings := w.Settings
	settings.SampleInterval = c.waveInterval(w, wv.Name)
	sampler := c.samples(settings.SampleInterval)
	ev := verdict.NoDisruptionEvidence{
		Evidence:        baseEvidence(fr, wv.Name, wv.Clusters, w.Now),
		Soak:            soak.String(),
		SampleInterval:  settings.SampleInterval.String(),
		MaxFailures:     maxFailuresOf(spec),
		ExpectedSamples: verdict.ExpectedSamples(soaked, settings.SampleInterval),
	}
	required := settings.RequiredSamples(soaked)
	held := make(map[string]string, len(wv.HeldBack))
	for _, h := range wv.HeldBack {
		held[h.Cluster] = h.Reason
	}
	var settled, asSeen, dependents []string
	summaries := make([]availability.ClusterSummary, 0, len(ev.Targets))
	for _, name := range ev.Targets {
		if reason, ok := held[name]; ok {
			ev.HeldBack = append(ev.HeldBack, verdict.HeldBack{Name: name, Reason: reason})
			continue
		}
		o := w.Kustomizations[name]
		ready, health, transient := o.JudgedAt(cand.Source, cand.Revision)
		if o.WaitingForDependency(cand.Source) {
			dependents = append(dependents, name+" ("+o.Message+")")
		}
		cc := verdict.ClusterContinuity{Name: name, Revision: o.LastApplied, HealthChecks: health, Transient: transient}
		cc.Ready = !slices.Contains(wv.Missing, name) && ready
		switch {
		case transient == "":
		case cc.Ready:
			settled = append(settled, name)
		default:
			asSeen = append(asSeen, name)
		}
		s := sampler.Summary(sampleKey(fr, wv.Name, name), since, w.Now)
		s.Cluster = name
		summaries = append(summaries, s)
		cc.Samples, cc.FailedSamples = s.Samples, s.FailedSamples
		cc.SetAvailability(s.Measured(), s.MinAvailableRatio, s.UnavailableSeconds)
		cc.ObservedSamples = s.Samples - s.FailedSamples
		switch {
		case s.LastFailed:
			ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Name: name, Reason: "its last sample could not read any workload: " + lastError(s)})
		case wv.ReadyAt != nil && cc.ObservedSamples < required:
			// Coverage is a soak's question: a wave decided before it soaked (a member failed at
			// the candidate) was not sampled, and is judged on what its Kustomizations say.
			ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Name: name,
				Reason: fmt.Sprintf("%d of %d samples read every workload, %d needed", cc.ObservedSamples, s.Samples, required)})
		}
		ev.Clusters = append(ev.Clusters, cc)
	}
	win := metricWindow{start: since, end: w.Now, step: settings.SampleInterval, required: required}
	if wv.StartedAt != nil {
		win.switched = wv.StartedAt.Time
	}
	c.serviceMetrics(ctx, w, wv, win, &ev)
	c.functionalChecks(ctx, w, wv, &ev)
	ev.Limits = append(ev.Limits, availability.Limits(summaries...)...)
	if len(settled) > 0 {
		ev.Limits = append(ev.Limits, fmt.Sprintf("%d clusters were mid-reconcile when the evidence was collected (%s): their ready and healthChecks are those of their last finished reconcile of the candidate (status.history)",
			len(settled), firstOf(settled)))
	}
	if len(asSeen) > 0 {
		ev.Limits = append(ev.Limits, fmt.Sprintf("%d clusters were between two reconcile outcomes with none finished to go by (%s): they are judged as seen",
			len(asSeen), firstOf(asSeen)))
	}
	if len(dependents) > 0 {
		ev.Limits = append(ev.Limits, fmt.Sprintf("%d clusters applied nothing of the candidate: kustomize-controller holds them until a rollout they depend on (spec.template.dependsOn) is Ready there (%s); they are not ready",
			len(dependents), firstOf(dependents)))
	}
	if len(ev.HeldBack) > 0 {
		ev.Limits = append(ev.Limits, fmt.Sprintf("%d members were held back before the wave, their preflight failed: they were not switched, have no continuity evidence, and count against maxFailures",
			len(ev.HeldBack)))
	}
	return ev
}

// lastError is the last error a summary kept, or a placeholder.
func lastError(s availability.ClusterSummary) string {
	if len(s.Errors) == 0 {
		return "no error recorded"
	}
	return s.Errors[len(s.Errors)-1]
}

// firstOf names the first few of names, then how many more.
func firstOf(names []string) string {
	const shown = 5
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:shown], ", ") + fmt.Sprintf(" and %d more", len(names)-shown)
}
