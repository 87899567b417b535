package availability

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Defaults for Options.
const (
	// DefaultInterval is the schema's default sampleInterval.
	DefaultInterval = 5 * time.Second
	// DefaultMaxSamples keeps a soak of about 85 minutes at DefaultInterval sample by sample, in
	// under 100 KiB per cluster.
	DefaultMaxSamples = 1024
	// DefaultMaxErrors is how many distinct error messages a cluster keeps.
	DefaultMaxErrors = 10
	// maxErrorLen bounds one kept error message (an API error can carry a whole proxy's HTML page).
	maxErrorLen = 512
	// longGapFactor: a gap between samples longer than this many intervals is reported as such.
	longGapFactor = 3
	// maxJudgedKinds bounds the kinds a cluster keeps as judged by health check expressions.
	maxJudgedKinds = 16
)

// Options tunes a Sampler.
type Options struct {
	// Interval is how often the caller means to sample each cluster. The Sampler does not sample by
	// itself: Interval is what it judges gaps against (a gap longer than 3 intervals is reported) and
	// how long an unavailable last sample counts for. Defaults to DefaultInterval.
	Interval time.Duration
	// MaxSamples is how many samples a cluster keeps one by one; older ones are folded into a running
	// summary (see ClusterSummary.Folded). Defaults to DefaultMaxSamples.
	MaxSamples int
	// MaxErrors is how many distinct error messages a cluster keeps. Defaults to DefaultMaxErrors.
	MaxErrors int
}

// Sampler records workload availability samples per cluster and summarises them. It is safe for
// concurrent use; its memory is bounded per cluster by Options, and per Sampler by the clusters the
// caller has not yet forgotten.
type Sampler struct {
	opts Options

	mu       sync.Mutex
	clusters map[string]*history
	// evals are the health check expressions compiled, shared by every cluster.
	evals evaluators
}

// New returns an empty Sampler.
func New(opts Options) *Sampler {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.MaxSamples <= 0 {
		opts.MaxSamples = DefaultMaxSamples
	}
	if opts.MaxErrors <= 0 {
		opts.MaxErrors = DefaultMaxErrors
	}
	return &Sampler{opts: opts, clusters: map[string]*history{}}
}

// Interval is the sample interval the Sampler judges gaps against.
func (s *Sampler) Interval() time.Duration { return s.opts.Interval }

// Shortfall is the workload that was furthest below its desired availability in a summary, the first
// time it was that low.
type Shortfall struct {
	Workload Workload
	// Available and Desired are what the workload's status and spec said; both 0 when it was missing or
	// could not be read (see ClusterSummary.Errors for why).
	Available, Desired int32
	At                 time.Time
}

// ClusterSummary is one cluster's samples since a moment, summarised.
type ClusterSummary struct {
	Cluster string
	// Since and Until are the window the summary covers, as Summary was given them (zero: open).
	Since, Until time.Time
	// Interval is the Sampler's sample interval.
	Interval time.Duration
	// Samples is how many samples the window has.
	Samples int
	// MinAvailableRatio is the lowest available/desired ratio any workload was seen at, in [0, 1]: 1 for
	// a workload that desires no replicas (and for a sample of no workloads), 0 for one that was missing.
	// A read that failed saw nothing, so it is not a ratio: it lowers the observed samples instead
	// (FailedSamples). It is a measurement only when Measured; otherwise it is 0, and that 0 means
	// nothing.
	MinAvailableRatio float64
	// Worst is the workload behind MinAvailableRatio when it is below 1; nil otherwise.
	Worst *Shortfall
	// UnavailableSeconds is how long some workload was below its desired availability, counted
	// conservatively: the whole interval between two consecutive samples counts when either of them saw
	// a workload below (or missing), and such a last sample counts until Until, and for at least one
	// Interval. A sample whose reads failed saw nothing and counts nothing here: what was not observed
	// is not disruption. It counts in FailedSamples, which a gate weighs as missing evidence. It is a
	// measurement only when Measured: with no sample that read a workload, no unavailable time could
	// be seen, and its 0 means nothing.
	UnavailableSeconds float64
	// FirstSample and LastSample are the times of the window's first and last samples.
	FirstSample, LastSample time.Time
	// MaxGap is the largest interval between two consecutive samples of the window.
	MaxGap time.Duration
	// LongGaps is how many intervals between consecutive samples were longer than 3 × Interval.
	LongGaps int
	// Workloads is the most workloads one sample covered (0: the package has none the Sampler reads).
	Workloads int
	// ReadErrors is how many workload reads failed (a timeout, an error, an unsupported kind).
	ReadErrors int
	// FailedSamples is how many samples had a read fail: they did not observe every workload.
	FailedSamples int
	// LastFailed says the window's last sample read nothing at all: the cluster does not answer now.
	LastFailed bool
	// Observed is how many samples read at least one workload (or had none to read).
	Observed int
	// LastBelow says the window's last sample saw a workload below its desired availability.
	LastBelow bool
	// Missing is how many workload reads found no object, or one being deleted.
	Missing int
	// JudgedKinds are the kinds ("Kind.group") whose objects were judged by health check expressions
	// rather than by their replicas (see HealthCheck), in any sample of the cluster, sorted; at most
	// 16 of them.
	JudgedKinds []string
	// Errors are the distinct messages of the failed and missing reads last seen in the window, in the
	// order they were first seen, at most Options.MaxErrors of them, then a line saying how many more
	// errors had a message not kept.
	Errors []string
	// Folded says the window cuts through samples that were folded together to bound memory, so the
	// summary also counts some samples taken outside it.
	Folded bool
}

// Measured says the window has a sample that read some workload (or had none to read): only then
// are MinAvailableRatio and UnavailableSeconds measurements.
func (s ClusterSummary) Measured() bool { return s.Observed > 0 }

// sample is one compact sample of a cluster: all its workloads read at one time.
type sample struct {
	at time.Time
	// ratio is the lowest ratio of the workloads read; valid when observed.
	ratio float64
	// observed: some workload was read (or there is none to read).
	observed bool
	// below: some workload read was below its desired availability, or missing.
	below bool
	// worst is the workload with the lowest ratio when that is below 1.
	worst     *Shortfall
	workloads int
	failed    int
	missing   int
}

// tally folds samples, in time order, into the numbers of a summary.
type tally struct {
	samples     int
	observed    int // samples that read something
	first, last time.Time
	lastBelow   bool
	minRatio    float64
	worst       *Shortfall
	unavailable time.Duration
	// lastUnseen: the last sample read nothing (every read failed).
	lastUnseen    bool
	maxGap        time.Duration
	longGaps      int
	workloads     int
	failed        int
	failedSamples int
	missing       int
}

func (t *tally) add(s sample, interval time.Duration) {
	if t.samples == 0 {
		t.first = s.at
	} else {
		gap := s.at.Sub(t.last)
		t.maxGap = max(t.maxGap, gap)
		if gap > longGapFactor*interval {
			t.longGaps++
		}
		if t.lastBelow || s.below {
			t.unavailable += gap
		}
	}
	if s.observed {
		if t.observed == 0 || s.ratio < t.minRatio {
			t.minRatio, t.worst = s.ratio, s.worst
		}
		t.observed++
	}
	if s.failed > 0 {
		t.failedSamples++
	}
	t.lastUnseen = !s.observed
	t.samples++
	t.last, t.lastBelow = s.at, s.below
	t.workloads = max(t.workloads, s.workloads)
	t.failed += s.failed
	t.missing += s.missing
}

// errorRecord is one distinct error message of a cluster.
type errorRecord struct {
	msg         string
	first, last time.Time
}

// history is what a Sampler keeps of one cluster.
type history struct {
	// samples are the newest samples, in time order, at most Options.MaxSamples.
	samples []sample
	// folded summarises the samples evicted from the front of samples, all older than samples[0].
	folded tally
	// errs are the distinct error messages, at most Options.MaxErrors; dropped counts the errors whose
	// message did not fit (each time: the messages are not kept, so they cannot be told apart), seen
	// between droppedFirst and droppedLast.
	errs                      map[string]*errorRecord
	dropped                   int
	droppedFirst, droppedLast time.Time
	// judged are the kinds whose objects health check expressions judged, at most maxJudgedKinds.
	judged map[string]bool
}

// Observe takes one sample of cluster at now: it reads every workload from c (a few at a time) and
// records how many of its replicas were available against how many are desired (Deployment:
// status.availableReplicas / spec.replicas; StatefulSet: status.availableReplicas / spec.replicas;
// DaemonSet: status.numberAvailable / status.desiredNumberScheduled), or, for an object judged by
// health check expressions, whether they say it is Current (1 of 1) or not (0 of 1; see
// HealthCheck); expressions that cannot be evaluated are a failed read. A workload that is missing or
// being deleted counts as unavailable in the sample; one of an unsupported kind or that cannot be
// read (a nil c cannot read anything) is a failed read: the sample did not observe it (see
// ClusterSummary.FailedSamples). Either reason is kept for Summary.Errors. The sample
// is recorded whatever happens to the reads, even when ctx ends while they run (the reads not done
// by then fail); the returned error joins the read failures (not the missing objects, which are
// findings) for the caller to log.
//
// The only errors that record nothing are an empty cluster name, a zero now, a ctx already done when
// Observe is called, and a now older than the samples this cluster has folded away.
func (s *Sampler) Observe(ctx context.Context, cluster string, c client.Reader, workloads []Workload, now time.Time) error {
	if cluster == "" {
		return errors.New("observing workload availability: empty cluster name")
	}
	if now.IsZero() {
		return fmt.Errorf("observing workload availability on cluster %s: no sample time", cluster)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("observing workload availability on cluster %s: %w", cluster, err)
	}
	readings := make([]reading, len(workloads))
	if c == nil {
		for i, w := range workloads {
			readings[i] = reading{failed: true, err: fmt.Errorf("reading %s on cluster %s: no client for the cluster", w, cluster)}
		}
	} else {
		readAll(ctx, c, cluster, workloads, readings, &s.evals)
	}
	var failures []error
	for _, r := range readings {
		if r.failed {
			failures = append(failures, r.err)
		}
	}
	if err := s.record(cluster, now, workloads, readings); err != nil {
		return errors.Join(append([]error{err}, failures...)...)
	}
	return errors.Join(failures...)
}

// record adds the sample that readings (one per workload) make at now to cluster's history.
func (s *Sampler) record(cluster string, now time.Time, workloads []Workload, readings []reading) error {
	smp := sample{at: now, ratio: 1, workloads: len(workloads)}
	for i, r := range readings {
		if r.failed {
			smp.failed++
			continue
		}
		if r.missing {
			smp.missing++
		}
		smp.below = smp.below || r.below()
		if q := r.ratio(); q < smp.ratio {
			smp.ratio = q
			smp.worst = &Shortfall{Workload: workloads[i], Available: r.available, Desired: r.desired, At: now}
		}
	}
	smp.observed = len(workloads) == 0 || smp.failed < len(workloads)

	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.clusters[cluster]
	if h == nil {
		h = &history{errs: map[string]*errorRecord{}}
		s.clusters[cluster] = h
	}
	if len(h.samples) >= s.opts.MaxSamples {
		h.folded.add(h.samples[0], s.opts.Interval)
		n := copy(h.samples, h.samples[1:])
		h.samples[n] = sample{} // let the evicted Shortfall go
		h.samples = h.samples[:n]
	}
	if h.folded.samples > 0 && now.Before(h.folded.last) {
		return fmt.Errorf("recording a sample of cluster %s at %s: older than samples already folded (up to %s)",
			cluster, now.Format(time.RFC3339Nano), h.folded.last.Format(time.RFC3339Nano))
	}
	// Samples arrive in time order unless two Observe calls for one cluster overlap; keep them sorted.
	i := sort.Search(len(h.samples), func(i int) bool { return h.samples[i].at.After(now) })
	h.samples = append(h.samples, sample{})
	copy(h.samples[i+1:], h.samples[i:])
	h.samples[i] = smp

	for _, r := range readings {
		if r.err != nil {
			h.noteError(r.err.Error(), now, s.opts.MaxErrors)
		}
	}
	for _, w := range workloads {
		if k := w.judgedKind(); k != "" && !h.judged[k] && len(h.judged) < maxJudgedKinds {
			if h.judged == nil {
				h.judged = map[string]bool{}
			}
			h.judged[k] = true
		}
	}
	return nil
}

// noteError remembers msg as seen at now, within the bound of limit distinct messages.
func (h *history) noteError(msg string, now time.Time, limit int) {
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen] + "…"
	}
	if e := h.errs[msg]; e != nil {
		if now.After(e.last) {
			e.last = now
		}
		if now.Before(e.first) {
			e.first = now
		}
		return
	}
	if len(h.errs) >= limit {
		if h.dropped == 0 || now.Before(h.droppedFirst) {
			h.droppedFirst = now
		}
		if h.dropped == 0 || now.After(h.droppedLast) {
			h.droppedLast = now
		}
		h.dropped++
		return
	}
	h.errs[msg] = &errorRecord{msg: msg, first: now, last: now}
}

// Summary summarises the samples of cluster taken in the window [since, until]. A zero since opens the
// window at the first sample kept, a zero until closes it at the last; a caller deciding a soak passes
// its start and end, so that Limits can report the time at either end that nobody sampled. A cluster
// without samples in the window, or one the Sampler never saw, has Samples 0 and is not Measured.
func (s *Sampler) Summary(cluster string, since, until time.Time) ClusterSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ClusterSummary{Cluster: cluster, Since: since, Until: until, Interval: s.opts.Interval}
	h := s.clusters[cluster]
	if h == nil {
		return out
	}
	inWindow := func(at time.Time) bool { return !at.Before(since) && (until.IsZero() || !at.After(until)) }
	var t tally
	if h.folded.samples > 0 && !since.After(h.folded.last) && (until.IsZero() || !until.Before(h.folded.first)) {
		// The folded samples cannot be split: take them all, and say so when some lie outside the window.
		t = h.folded
		out.Folded = !inWindow(h.folded.first) || !inWindow(h.folded.last)
	}
	for _, smp := range h.samples {
		if inWindow(smp.at) {
			t.add(smp, s.opts.Interval)
		}
	}
	if t.samples == 0 {
		return out
	}
	unavailable := t.unavailable
	if t.lastBelow {
		// Nobody saw it recover: count at least one interval, and up to the end of the window.
		tail := s.opts.Interval
		if !until.IsZero() {
			tail = max(tail, until.Sub(t.last))
		}
		unavailable += tail
	}
	out.Samples = t.samples
	if t.observed > 0 {
		out.MinAvailableRatio = t.minRatio
	}
	if t.worst != nil {
		w := *t.worst
		out.Worst = &w
	}
	out.UnavailableSeconds = unavailable.Seconds()
	out.FirstSample, out.LastSample = t.first, t.last
	out.MaxGap, out.LongGaps = t.maxGap, t.longGaps
	out.Workloads, out.ReadErrors, out.FailedSamples, out.Missing = t.workloads, t.failed, t.failedSamples, t.missing
	out.LastFailed, out.Observed, out.LastBelow = t.lastUnseen, t.observed, t.lastBelow
	out.Errors = h.errorsIn(since, until)
	for k := range h.judged {
		out.JudgedKinds = append(out.JudgedKinds, k)
	}
	sort.Strings(out.JudgedKinds)
	return out
}

// errorsIn lists the distinct messages seen in the window [since, until] (or around it: a message is
// kept with the first and last time it was seen only), in the order first seen.
func (h *history) errorsIn(since, until time.Time) []string {
	var recs []*errorRecord
	for _, e := range h.errs {
		if !e.last.Before(since) && (until.IsZero() || !e.first.After(until)) {
			recs = append(recs, e)
		}
	}
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].first.Equal(recs[j].first) {
			return recs[i].first.Before(recs[j].first)
		}
		return recs[i].msg < recs[j].msg
	})
	out := make([]string, 0, len(recs)+1)
	for _, e := range recs {
		out = append(out, e.msg)
	}
	if h.dropped > 0 && !h.droppedLast.Before(since) && (until.IsZero() || !h.droppedFirst.After(until)) {
		out = append(out, fmt.Sprintf("and %d more errors whose messages were not kept", h.dropped))
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Forget drops everything the Sampler keeps about cluster (once its wave is decided). An Observe of
// the cluster still running when Forget is called records its sample afterwards; a later Summary with
// a since after that sample does not see it.
func (s *Sampler) Forget(cluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clusters, cluster)
}

// Clusters lists the clusters the Sampler keeps samples of, sorted, so a caller can forget the ones
// no longer in a wave.
func (s *Sampler) Clusters() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.clusters))
	for c := range s.clusters {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Seed is what was kept of a cluster's samples elsewhere (a rollout's status), to continue from
// after a restart.
type Seed struct {
	Samples, Failed, Observed int
	// MinRatio is the lowest ratio seen, valid when Observed > 0.
	MinRatio    float64
	Unavailable time.Duration
	First, Last time.Time
	// LastBelow and LastFailed are those of the last sample.
	LastBelow, LastFailed bool
}

// SeedOf is the Seed a summary makes.
func SeedOf(s ClusterSummary) Seed {
	return Seed{Samples: s.Samples, Failed: s.FailedSamples, Observed: s.Observed, MinRatio: s.MinAvailableRatio,
		Unavailable: time.Duration(s.UnavailableSeconds * float64(time.Second)), First: s.FirstSample, Last: s.LastSample,
		LastBelow: s.LastBelow, LastFailed: s.LastFailed}
}

// Seed starts cluster's history from sd, as if its samples had been taken and folded together, when
// the Sampler has nothing of cluster yet; it reports whether it did. Samples taken afterwards add to
// it: the gap since sd.Last is a gap like any other (a long one is reported), and counts as
// unavailable when sd's last sample was below.
func (s *Sampler) Seed(cluster string, sd Seed) bool {
	if cluster == "" || sd.Samples <= 0 || sd.Last.IsZero() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.clusters[cluster]; h != nil && (len(h.samples) > 0 || h.folded.samples > 0) {
		return false
	}
	first := sd.First
	if first.IsZero() || first.After(sd.Last) {
		first = sd.Last
	}
	h := &history{errs: map[string]*errorRecord{}}
	h.folded = tally{samples: sd.Samples, observed: min(sd.Observed, sd.Samples), first: first, last: sd.Last,
		lastBelow: sd.LastBelow, lastUnseen: sd.LastFailed, minRatio: sd.MinRatio, unavailable: sd.Unavailable,
		failedSamples: min(sd.Failed, sd.Samples)}
	s.clusters[cluster] = h
	return true
}
