package scale

import (
	"context"
	"sort"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Release is what the rollout of one revision measured.
type Release struct {
	Name, Revision string
	// Outcome is the phase the rollout ended in, or why it did not end.
	Outcome    string
	Start, End time.Time
	// FirstSwitch is the canary's switch: the commit → first switch time includes the tracked
	// source's interval.
	FirstSwitch time.Time
	Waves       []WaveResult
	Transitions []Transition
	// KustomizationWrites are the controller's writes of the rollout's Kustomizations.
	KustomizationWrites Writes
	// PinnedCreated and PinnedRefused count the controller's creates of pinned sources, made and
	// refused (AlreadyExists).
	PinnedCreated, PinnedRefused int
	// Hub and Members count the controller's requests.
	Hub, Members Counts
	// Reconciles of each controller (fleetrollout, fleetcluster), from its metrics, since
	// ReconcilesSince when the controller restarted during the release (else since Start).
	Reconciles      map[string]float64
	ReconcilesSince time.Time
	Gates           []GateTiming
	// Preflights are the bursts of the controller's dry-runs on the members; Sampling is its
	// workload reads on the members while each wave soaked.
	Preflights []Burst
	Sampling   []WaveSampling
	CPU        CPU
}

// WaveResult is one wave of a release, as the bench's watch saw it.
type WaveResult struct {
	Name  string
	Size  int
	Phase string
	// FirstSwitch and LastSwitch bound the switches of its members to the candidate; LastReady is
	// when the last of them was Ready at the candidate (zero when not all were).
	FirstSwitch, LastSwitch, LastReady time.Time
	Ready, Failed                      int
	Soak                               time.Duration
	// ControllerReadyAt is status.waves[].readyAt, as the controller recorded it (second precision).
	ControllerReadyAt time.Time
}

// Transition is the decision between one wave and the next.
type Transition struct {
	From, To string
	// Size is the next wave's.
	Size int
	// LastReady is when the last member of From was Ready at the candidate; SoakEnd is LastReady
	// plus From's soak; Decided is the next wave's first switch, or Completed for the last wave.
	LastReady, SoakEnd, Decided time.Time
	// Switches are the next wave's switches, each from SoakEnd.
	Switches []time.Duration
}

// FromReady is last member Ready → decision.
func (t Transition) FromReady() time.Duration { return t.Decided.Sub(t.LastReady) }

// FromSoakEnd is soak end → decision: the time the controller took to decide and act.
func (t Transition) FromSoakEnd() time.Duration { return t.Decided.Sub(t.SoakEnd) }

// Percentile is the p-th percentile (0–100) of the next wave's switches from SoakEnd.
func (t Transition) Percentile(p float64) (time.Duration, bool) { return percentile(t.Switches, p) }

func percentile(ds []time.Duration, p float64) (time.Duration, bool) {
	if len(ds) == 0 {
		return 0, false
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)], true
}

// Writes are writes per object.
type Writes struct {
	// Objects is the number of objects counted (every cluster of the rollout), Total the writes.
	Objects, Total int
	// Max is the most writes of one object, to MaxObject.
	Max       int
	MaxObject string
}

// PerObject is the mean.
func (w Writes) PerObject() float64 {
	if w.Objects == 0 {
		return 0
	}
	return float64(w.Total) / float64(w.Objects)
}

// GateTiming is one gate decision, from the hub's audit log: when its receipt was written and
// how long after the start of its pass (or the previous receipt of the pass) that was.
type GateTiming struct {
	Gate, Wave, Result string
	At                 time.Time
	Took               time.Duration
	// Refused is a receipt the API server already had (an identical decision).
	Refused bool
	// Transient is, for noDisruption, how many of the wave's members were mid re-reconcile (Ready
	// or Healthy Unknown at the applied revision) when it was decided.
	Transient int
}

// WaveSampling is the controller's availability sampling of one soaking wave: its workload reads on
// the members from the wave's last member Ready to the next decision.
type WaveSampling struct {
	Wave   string
	Size   int
	Window time.Duration
	Reads  int
	// Passes are the runs of reads with gaps under a second: one sampling pass each, or two
	// back to back.
	Passes []Burst
}

// Burst is a run of requests with short gaps: one preflight of a wave, one sampling pass.
type Burst struct {
	Start    time.Time
	Took     time.Duration
	Requests int
}

// CPU is the CPU seconds each process used over a window.
type CPU struct {
	Tidegate, Kustomize, Source float64
	// TidegateMeasured is false when the controller ran in-process; KustomizeMeasured is false
	// with the stand-in.
	TidegateMeasured, KustomizeMeasured bool
}

// cpuMark is a reading of the processes' CPU, for windows.
type cpuMark struct{ tidegate, kustomize, source float64 }

func (h *Harness) cpuNow() cpuMark {
	var m cpuMark
	if u, ok := h.ctl.usage(); ok {
		m.tidegate = u.CPUSeconds
	}
	if u, ok := procUsage(h.fleet.PID("kustomize-controller")); ok {
		m.kustomize = u.CPUSeconds
	}
	if u, ok := procUsage(h.fleet.PID("source-controller")); ok {
		m.source = u.CPUSeconds
	}
	return m
}

func (h *Harness) cpuSince(m cpuMark) CPU {
	now := h.cpuNow()
	_, tg := h.ctl.usage()
	return CPU{Tidegate: now.tidegate - m.tidegate, Kustomize: now.kustomize - m.kustomize, Source: now.source - m.source,
		TidegateMeasured: tg, KustomizeMeasured: h.cfg.Flux == RealFlux}
}

// reconciles is the difference of each controller's reconcile count between two scrapes; nil when
// either scrape failed.
func reconciles(before, after Sample) map[string]float64 {
	if !before.Has("controller_runtime_reconcile_total") || !after.Has("controller_runtime_reconcile_total") {
		return nil
	}
	out := map[string]float64{}
	for _, c := range []string{"fleetrollout", "fleetcluster"} {
		out[c] = after.Sum("controller_runtime_reconcile_total", map[string]string{"controller": c}) -
			before.Sum("controller_runtime_reconcile_total", map[string]string{"controller": c})
	}
	return out
}

// measure computes a release's figures from the watch and the audit logs over [start, end].
func (h *Harness) measure(ctx context.Context, rel *Release, final rolloutState) error {
	if err := h.audit.sync(); err != nil {
		return err
	}
	st := final.status
	source := ""
	if st.Candidate != nil {
		source = st.Candidate.Source
	}
	for _, w := range st.Waves {
		wr := WaveResult{Name: w.Name, Size: len(w.Clusters), Phase: w.Phase, Soak: h.soak}
		if w.ReadyAt != nil {
			wr.ControllerReadyAt = w.ReadyAt.Time
		}
		for _, c := range w.Clusters {
			sw, ok := h.tl.switchedAt(c, source, rel.Start)
			if !ok {
				continue
			}
			if wr.FirstSwitch.IsZero() || sw.Before(wr.FirstSwitch) {
				wr.FirstSwitch = sw
			}
			if sw.After(wr.LastSwitch) {
				wr.LastSwitch = sw
			}
			if r, ok := h.tl.readyAt(c, source, rel.Revision, sw); ok {
				wr.Ready++
				if r.After(wr.LastReady) {
					wr.LastReady = r
				}
			} else if _, failed := h.tl.failedAt(c, source, sw); failed {
				wr.Failed++
			}
		}
		if wr.Ready < wr.Size {
			wr.LastReady = time.Time{}
		}
		rel.Waves = append(rel.Waves, wr)
	}
	if len(rel.Waves) > 0 {
		rel.FirstSwitch = rel.Waves[0].FirstSwitch
	}
	completed, _ := h.tl.rolloutWhen(rel.Start, func(r rolloutState) bool {
		return r.status.Phase == v1alpha1.PhaseCompleted && r.status.Candidate != nil && r.status.Candidate.Revision == rel.Revision
	})
	for i, w := range rel.Waves {
		if w.LastReady.IsZero() {
			continue
		}
		t := Transition{From: w.Name, LastReady: w.LastReady, SoakEnd: w.LastReady.Add(w.Soak)}
		if i+1 < len(rel.Waves) {
			next := rel.Waves[i+1]
			if next.FirstSwitch.IsZero() {
				continue
			}
			t.To, t.Size, t.Decided = next.Name, next.Size, next.FirstSwitch
			for _, c := range st.Waves[i+1].Clusters {
				if sw, ok := h.tl.switchedAt(c, source, rel.Start); ok {
					t.Switches = append(t.Switches, sw.Sub(t.SoakEnd))
				}
			}
		} else {
			if completed.at.IsZero() {
				continue
			}
			t.To, t.Decided = "(Completed)", completed.at
			t.Switches = []time.Duration{completed.at.Sub(t.SoakEnd)}
		}
		rel.Transitions = append(rel.Transitions, t)
	}

	hub := h.audit.Hub(rel.Start, rel.End)
	members := h.audit.Members(rel.Start, rel.End)
	rel.Hub, rel.Members = countRequests(hub, nil), countRequests(members, nil)
	rel.KustomizationWrites = h.kustomizationWrites(hub)
	for _, r := range hub {
		if r.Verb == "create" && (r.Resource == "gitrepositories" || r.Resource == "ocirepositories") {
			if r.Code == 409 {
				rel.PinnedRefused++
			} else {
				rel.PinnedCreated++
			}
		}
	}
	gates, err := h.gateTimings(ctx, hub)
	if err != nil {
		return err
	}
	rel.Gates = gates
	var dry, reads []Request
	for _, r := range members {
		switch {
		case r.DryRun:
			dry = append(dry, r)
		case r.Verb == "get" && r.Resource == "deployments":
			reads = append(reads, r)
		}
	}
	rel.Preflights = toBursts(bursts(dry, 2*time.Second))
	for i, w := range rel.Waves {
		if w.LastReady.IsZero() {
			continue
		}
		end := rel.End
		for _, t := range rel.Transitions {
			if t.From == w.Name {
				end = t.Decided
			}
		}
		var in []Request
		for _, r := range reads {
			if !r.At.Before(w.LastReady) && r.At.Before(end) {
				in = append(in, r)
			}
		}
		ws := WaveSampling{Wave: w.Name, Size: len(st.Waves[i].Clusters), Window: end.Sub(w.LastReady), Reads: len(in)}
		ws.Passes = toBursts(bursts(in, time.Second))
		rel.Sampling = append(rel.Sampling, ws)
	}
	return nil
}

func toBursts(bs [][]Request) []Burst {
	out := make([]Burst, 0, len(bs))
	for _, b := range bs {
		out = append(out, Burst{Start: b[0].At, Took: b[len(b)-1].At.Sub(b[0].At), Requests: len(b)})
	}
	return out
}

// kustomizationWrites counts the controller's writes of each cluster's Kustomization (not of its
// status, which the controller never writes).
func (h *Harness) kustomizationWrites(reqs []Request) Writes {
	per := map[string]int{}
	for _, r := range reqs {
		if r.Resource == "kustomizations" && r.Write() {
			per[r.Name]++
		}
	}
	w := Writes{Objects: len(h.names)}
	for _, c := range h.names {
		name := v1alpha1.KustomizationName(RolloutName, c)
		n := per[name]
		w.Total += n
		if n > w.Max {
			w.Max, w.MaxObject = n, name
		}
	}
	return w
}

// gateTimings reads the receipts the controller wrote among reqs. A receipt's time is from the
// start of its reconcile (the controller's uncached read of the rollout) or from the previous
// receipt of the same reconcile: the collection and evaluation of that gate, and the write.
func (h *Harness) gateTimings(ctx context.Context, reqs []Request) ([]GateTiming, error) {
	var list v1alpha1.GateReceiptList
	if err := h.hub.List(ctx, &list, client.InNamespace(h.fleet.Namespace)); err != nil {
		return nil, err
	}
	byName := map[string]*v1alpha1.GateReceipt{}
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	var out []GateTiming
	var passStart, last time.Time
	for _, r := range reqs {
		if r.Verb == "get" && r.Resource == "fleetrollouts" && r.Name == RolloutName {
			passStart, last = r.At, r.At
			continue
		}
		if r.Verb != "create" || r.Resource != "gatereceipts" || passStart.IsZero() {
			continue
		}
		g := GateTiming{At: r.At, Took: r.At.Sub(last), Refused: r.Code == 409}
		last = r.At
		if rc := byName[r.Name]; rc != nil {
			g.Gate, g.Wave, g.Result = rc.Spec.Gate, rc.Spec.Wave, rc.Spec.Result
			if g.Gate == v1alpha1.GateNoDisruption {
				g.Transient = h.tl.transientAt(r.At, rc.Spec.Targets)
			}
		}
		out = append(out, g)
	}
	return out, nil
}
