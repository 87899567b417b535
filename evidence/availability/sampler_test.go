package availability

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The arithmetic of samples, on a fake clock: readings are recorded directly, without a client.

const cl = "member-1"

var (
	t0  = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	web = Workload{Kind: KindDeployment, Namespace: "demo", Name: "web"}
	db  = Workload{Kind: KindStatefulSet, Namespace: "demo", Name: "db"}
)

// at is t0 plus s seconds: the fake clock.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func ok(n int32) reading         { return reading{available: n, desired: n} }
func partial(a, d int32) reading { return reading{available: a, desired: d} }
func gone(w Workload) reading {
	return reading{missing: true, err: fmt.Errorf("%s not found on cluster %s", w, cl)}
}
func broken(msg string) reading { return reading{failed: true, err: errors.New(msg)} }
func rec(t *testing.T, s *Sampler, sec float64, rs ...reading) {
	t.Helper()
	ws := make([]Workload, len(rs))
	for i := range rs {
		ws[i] = web
		if i > 0 {
			ws[i] = db
		}
	}
	if err := s.record(cl, at(sec), ws, rs); err != nil {
		t.Fatal(err)
	}
}

func TestHealthySamplesShowFullAvailability(t *testing.T) {
	s := New(Options{})
	for i := range 5 {
		rec(t, s, float64(5*i), ok(3), ok(1))
	}
	got := s.Summary(cl, at(0), at(20))
	want := ClusterSummary{
		Cluster: cl, Since: at(0), Until: at(20), Interval: 5 * time.Second, Samples: 5,
		MinAvailableRatio: 1, FirstSample: at(0), LastSample: at(20), MaxGap: 5 * time.Second, Workloads: 2, Observed: 5,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("summary\n got %+v\nwant %+v", got, want)
	}
	wantLimits := []string{"workload availability sampled every 5s; an outage shorter than the sample interval may be missed"}
	if l := Limits(got); !reflect.DeepEqual(l, wantLimits) {
		t.Fatalf("limits %q, want %q", l, wantLimits)
	}
}

func TestUnavailableTimeIsCountedConservatively(t *testing.T) {
	type step struct {
		sec float64
		rs  []reading
	}
	cases := []struct {
		name        string
		steps       []step
		until       float64 // 0: open
		ratio       float64
		unavailable float64
		failed      int // samples with a failed read
	}{
		{"one bad sample taints both intervals around it",
			[]step{{0, []reading{ok(2)}}, {5, []reading{partial(0, 2)}}, {10, []reading{ok(2)}}}, 0, 0, 10, 0},
		{"partial availability is below desired",
			[]step{{0, []reading{ok(2)}}, {5, []reading{ok(4), partial(2, 4)}}, {10, []reading{ok(2)}}, {15, []reading{ok(2)}}}, 0, 0.5, 10, 0},
		{"the lowest ratio of any workload in any sample",
			[]step{{0, []reading{partial(3, 4)}}, {5, []reading{partial(1, 3)}}, {10, []reading{ok(1)}}}, 0, 1.0 / 3, 10, 0},
		{"an unavailable last sample counts one interval",
			[]step{{0, []reading{ok(2)}}, {5, []reading{ok(2)}}, {10, []reading{partial(1, 2)}}}, 0, 0.5, 10, 0},
		{"an unavailable last sample counts up to the end of the window",
			[]step{{0, []reading{ok(2)}}, {5, []reading{ok(2)}}, {10, []reading{partial(1, 2)}}}, 30, 0.5, 25, 0},
		{"a single unavailable sample counts one interval",
			[]step{{0, []reading{partial(0, 1)}}}, 0, 0, 5, 0},
		{"a missing workload is unavailable",
			[]step{{0, []reading{ok(1)}}, {5, []reading{gone(web)}}}, 0, 0, 10, 0},
		{"a failed read counts no unavailable time and no ratio: nothing was seen",
			[]step{{0, []reading{broken("reading Deployment demo/web on cluster member-1: timeout")}}, {5, []reading{ok(1)}}}, 0, 1, 0, 1},
		{"a failed read between two good samples counts nothing, nor the gaps around it",
			[]step{{0, []reading{ok(1)}}, {20, []reading{broken("timeout")}}, {40, []reading{ok(1)}}}, 0, 1, 0, 1},
		{"failed samples are counted as failed, not as unavailable",
			[]step{{0, []reading{ok(1)}}, {5, []reading{broken("timeout")}}, {10, []reading{broken("timeout")}}, {15, []reading{broken("timeout")}}, {20, []reading{ok(1)}}}, 0, 1, 0, 3},
		{"a failed last sample counts nothing up to the end of the window",
			[]step{{0, []reading{ok(1)}}, {5, []reading{broken("timeout")}}}, 30, 1, 0, 1},
		{"an outage counts up to the failed read after it, and not past it",
			[]step{{0, []reading{ok(1)}}, {5, []reading{partial(0, 1)}}, {10, []reading{broken("timeout")}}, {15, []reading{ok(1)}}}, 0, 0, 10, 1},
		{"a sample that saw one workload below and failed to read another is below",
			[]step{{0, []reading{ok(2), ok(2)}}, {5, []reading{broken("timeout"), partial(0, 2)}}, {10, []reading{ok(2), ok(2)}}}, 0, 0, 10, 1},
		{"reads that all failed saw nothing: no ratio is known",
			[]step{{0, []reading{broken("timeout")}}, {5, []reading{broken("timeout")}}}, 0, 0, 0, 2},
		{"nothing desired is fully available",
			[]step{{0, []reading{partial(0, 0)}}, {5, []reading{partial(0, 0)}}}, 0, 1, 0, 0},
		{"more than desired (a surge) is fully available",
			[]step{{0, []reading{partial(4, 3)}}, {5, []reading{partial(3, 3)}}}, 0, 1, 0, 0},
		{"no workloads is fully available",
			[]step{{0, nil}, {5, nil}}, 0, 1, 0, 0},
		{"uneven intervals count their real length",
			[]step{{0, []reading{ok(1)}}, {2, []reading{partial(0, 1)}}, {9, []reading{ok(1)}}, {12, []reading{ok(1)}}}, 0, 0, 9, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Options{Interval: 5 * time.Second})
			for _, st := range tc.steps {
				rec(t, s, st.sec, st.rs...)
			}
			var until time.Time
			if tc.until != 0 {
				until = at(tc.until)
			}
			got := s.Summary(cl, time.Time{}, until)
			if got.Samples != len(tc.steps) || got.MinAvailableRatio != tc.ratio || got.UnavailableSeconds != tc.unavailable || got.FailedSamples != tc.failed {
				t.Fatalf("samples %d, ratio %v, unavailable %vs, failed samples %d; want %d, %v, %vs, %d",
					got.Samples, got.MinAvailableRatio, got.UnavailableSeconds, got.FailedSamples, len(tc.steps), tc.ratio, tc.unavailable, tc.failed)
			}
			// A workload was seen below its desired availability exactly when the ratio is below 1 and
			// some read succeeded.
			seen := tc.ratio < 1 && got.FailedSamples < got.Samples
			if (got.Worst != nil) != seen {
				t.Fatalf("worst %+v with ratio %v", got.Worst, tc.ratio)
			}
			// The ratio and the unavailable time are measurements when some sample read a workload
			// (or had none to read), and only then.
			measured := false
			for _, st := range tc.steps {
				read := len(st.rs) == 0
				for _, r := range st.rs {
					read = read || !r.failed
				}
				measured = measured || read
			}
			if got.Measured() != measured {
				t.Fatalf("measured %t, want %t", got.Measured(), measured)
			}
		})
	}
}

func TestWorstNamesTheWorkloadAndWhenItWasLowest(t *testing.T) {
	s := New(Options{})
	rec(t, s, 0, ok(3), ok(1))
	rec(t, s, 5, ok(3), partial(0, 1))
	rec(t, s, 10, partial(1, 3), partial(0, 1)) // as low again later: the first time is kept
	got := s.Summary(cl, time.Time{}, time.Time{})
	want := &Shortfall{Workload: db, Available: 0, Desired: 1, At: at(5)}
	if !reflect.DeepEqual(got.Worst, want) {
		t.Fatalf("worst %+v, want %+v", got.Worst, want)
	}
}

func TestNoSamplesFailClosed(t *testing.T) {
	s := New(Options{})
	got := s.Summary("member-9", at(0), at(60))
	if got.Samples != 0 || got.Measured() || got.Cluster != "member-9" {
		t.Fatalf("a cluster never sampled: %+v", got)
	}
	// Samples outside the window are no samples either.
	rec(t, s, 100, ok(1))
	got = s.Summary(cl, at(0), at(60))
	if got.Samples != 0 || got.Measured() {
		t.Fatalf("a window without samples: %+v", got)
	}
	want := []string{"no availability samples on member-1: nothing is known of the workloads there (minAvailableRatio and unavailableSeconds not measured)"}
	if l := Limits(got); !reflect.DeepEqual(l, want) {
		t.Fatalf("limits %q, want %q", l, want)
	}
}

func TestGapsAndUnsampledEndsAreReported(t *testing.T) {
	s := New(Options{Interval: 5 * time.Second})
	for _, sec := range []float64{30, 35, 40, 47, 67, 72} {
		rec(t, s, sec, ok(1))
	}
	got := s.Summary(cl, at(0), at(100))
	if got.MaxGap != 20*time.Second || got.LongGaps != 1 || got.UnavailableSeconds != 0 || got.MinAvailableRatio != 1 {
		t.Fatalf("summary %+v", got)
	}
	want := []string{
		"workload availability sampled every 5s; an outage shorter than the largest gap between samples (20s) may be missed",
		"gaps of more than 15s (3 sample intervals) between samples on member-1 (1 gap, the largest 20s): availability during them is unknown",
		"sampling began late on member-1 (30s): the start of the window was not observed",
		"sampling stopped early on member-1 (28s): the end of the window was not observed",
	}
	if l := Limits(got); !reflect.DeepEqual(l, want) {
		t.Fatalf("limits\n%s\nwant\n%s", strings.Join(l, "\n"), strings.Join(want, "\n"))
	}
	// A gap of up to three intervals is an irregular sample, not a hole in the evidence.
	got = s.Summary(cl, at(30), at(50))
	if got.MaxGap != 7*time.Second || got.LongGaps != 0 || got.Samples != 4 {
		t.Fatalf("summary %+v", got)
	}
	want = []string{"workload availability sampled every 5s; an outage shorter than the largest gap between samples (7s) may be missed"}
	if l := Limits(got); !reflect.DeepEqual(l, want) {
		t.Fatalf("limits %q, want %q", l, want)
	}
}

func TestTheWindowSelectsSamples(t *testing.T) {
	s := New(Options{})
	rec(t, s, 0, partial(0, 1)) // before the soak: not its business
	for i := 1; i <= 4; i++ {
		rec(t, s, float64(5*i), ok(1))
	}
	rec(t, s, 25, partial(0, 1)) // after the soak
	got := s.Summary(cl, at(5), at(20))
	if got.Samples != 4 || got.MinAvailableRatio != 1 || got.UnavailableSeconds != 0 || !got.FirstSample.Equal(at(5)) || !got.LastSample.Equal(at(20)) {
		t.Fatalf("summary %+v", got)
	}
	if got := s.Summary(cl, time.Time{}, time.Time{}); got.Samples != 6 || got.UnavailableSeconds != 15 {
		t.Fatalf("open window: %+v", got)
	}
}

func TestSamplesArrivingOutOfOrderAreSorted(t *testing.T) {
	s := New(Options{})
	rec(t, s, 10, ok(1))
	rec(t, s, 0, ok(1))
	rec(t, s, 5, partial(0, 1))
	got := s.Summary(cl, time.Time{}, time.Time{})
	if !got.FirstSample.Equal(at(0)) || !got.LastSample.Equal(at(10)) || got.UnavailableSeconds != 10 || got.MaxGap != 5*time.Second {
		t.Fatalf("summary %+v", got)
	}
}

// A cluster keeps MaxSamples samples one by one and folds older ones; whole-history summaries are exact.
func TestMemoryIsBoundedWithoutLosingOldSamples(t *testing.T) {
	small, big := New(Options{MaxSamples: 4}), New(Options{})
	for i := range 40 {
		r := ok(2)
		switch i {
		case 3:
			r = partial(1, 2)
		case 7:
			r = gone(web)
		case 25:
			r = broken("reading Deployment demo/web on cluster member-1: timeout")
		}
		rec(t, small, float64(5*i), r)
		rec(t, big, float64(5*i), r)
	}
	if n := len(small.clusters[cl].samples); n != 4 {
		t.Fatalf("%d samples kept, want 4", n)
	}
	for _, w := range [][2]time.Time{{}, {at(0), at(195)}, {at(180), {}}, {at(0), at(190)}} {
		a, b := small.Summary(cl, w[0], w[1]), big.Summary(cl, w[0], w[1])
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("window %v: folded summary\n %+v\nunfolded\n %+v", w, a, b)
		}
	}
	// A window that cuts through the folded samples takes them all, and says so.
	got := small.Summary(cl, at(100), time.Time{})
	if !got.Folded || got.Samples != 40 || got.MinAvailableRatio != 0 {
		t.Fatalf("summary %+v", got)
	}
	l := Limits(got)
	if last := l[len(l)-1]; last != "samples were folded together to bound memory on member-1: the summary also counts samples from outside the window" {
		t.Fatalf("limits %q", l)
	}
	// A sample older than the folded ones cannot be placed.
	if err := small.record(cl, at(1), []Workload{web}, []reading{ok(1)}); err == nil || !strings.Contains(err.Error(), "cluster member-1") {
		t.Fatalf("recording before the folded samples: %v", err)
	}
}

func TestErrorsAreKeptDistinctAndBounded(t *testing.T) {
	s := New(Options{MaxErrors: 2})
	long := "reading Deployment demo/web on cluster member-1: " + strings.Repeat("x", 2000)
	rec(t, s, 0, broken(long))
	rec(t, s, 5, broken(long), gone(db))
	for i := range 3 {
		rec(t, s, float64(10+5*i), broken(fmt.Sprintf("error %d", i)))
	}
	rec(t, s, 25, broken("error 0")) // a message not kept is counted again: it cannot be recognised
	const more = "and 4 more errors whose messages were not kept"
	got := s.Summary(cl, time.Time{}, time.Time{})
	if len(got.Errors) != 3 || len(got.Errors[0]) > maxErrorLen+len("…") || !strings.HasPrefix(got.Errors[0], "reading Deployment demo/web on cluster member-1: xxx") ||
		got.Errors[1] != "StatefulSet demo/db not found on cluster member-1" || got.Errors[2] != more {
		t.Fatalf("errors %q", got.Errors)
	}
	if got.ReadErrors != 6 || got.Missing != 1 {
		t.Fatalf("read errors %d, missing %d", got.ReadErrors, got.Missing)
	}
	// Only the errors seen in the window.
	if got := s.Summary(cl, at(6), time.Time{}); len(got.Errors) != 1 || got.Errors[0] != more {
		t.Fatalf("errors since 6s: %q", got.Errors)
	}
	if got := s.Summary(cl, at(0), at(4)); len(got.Errors) != 1 || !strings.HasPrefix(got.Errors[0], "reading Deployment") || got.ReadErrors != 1 {
		t.Fatalf("errors up to 4s: %q", got.Errors)
	}
	want := "workload reads failed (timeouts, errors) on member-1 (6 reads in 6 samples): such a sample did not observe every workload, and counts neither as available nor as unavailable time"
	if l := Limits(got); l[1] != want {
		t.Fatalf("limits %q", l)
	}
}

func TestWaveLimitsNameClustersBoundedly(t *testing.T) {
	var sums []ClusterSummary
	for i := 1; i <= 8; i++ {
		sums = append(sums, ClusterSummary{Cluster: fmt.Sprintf("member-%d", i), Interval: 5 * time.Second})
	}
	sums[0] = ClusterSummary{Cluster: "member-1", Interval: 5 * time.Second, Samples: 12, MaxGap: 9 * time.Second, MinAvailableRatio: 1, ReadErrors: 2, FailedSamples: 1, Workloads: 3}
	sums[1] = ClusterSummary{Cluster: "member-2", Interval: 5 * time.Second, Samples: 12, MaxGap: 6 * time.Second, MinAvailableRatio: 1}
	want := []string{
		"workload availability sampled every 5s; an outage shorter than the largest gap between samples (9s on member-1) may be missed",
		"no availability samples on member-3, member-4, member-5, member-6, member-7 and 1 more: nothing is known of the workloads there (minAvailableRatio and unavailableSeconds not measured)",
		"workload reads failed (timeouts, errors) on member-1 (2 reads in 1 sample): such a sample did not observe every workload, and counts neither as available nor as unavailable time",
		"no Deployment, StatefulSet or DaemonSet to sample on member-2: there is no workload availability to lose (minAvailableRatio 1)",
	}
	if l := Limits(sums...); !reflect.DeepEqual(l, want) {
		t.Fatalf("limits\n%s\nwant\n%s", strings.Join(l, "\n"), strings.Join(want, "\n"))
	}
	if l := Limits(); l != nil {
		t.Fatalf("limits of no summaries: %q", l)
	}
}

func TestForgetAndClusters(t *testing.T) {
	s := New(Options{})
	rec(t, s, 0, ok(1))
	if err := s.record("member-2", at(0), nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.Clusters(); !reflect.DeepEqual(got, []string{"member-1", "member-2"}) {
		t.Fatalf("clusters %q", got)
	}
	s.Forget(cl)
	if got := s.Summary(cl, time.Time{}, time.Time{}); got.Samples != 0 || got.MinAvailableRatio != 0 {
		t.Fatalf("after Forget: %+v", got)
	}
	if got := s.Clusters(); !reflect.DeepEqual(got, []string{"member-2"}) {
		t.Fatalf("clusters %q", got)
	}
}

// Recording, summarising and forgetting from many goroutines at once loses nothing: each cluster's
// summary is the one a Sampler given the same samples one at a time makes, a reader never sees a
// cluster's history go back, and a forgotten cluster is gone.
func TestConcurrentUse(t *testing.T) {
	// Two writers per cluster take the seconds of its samples in turn from one clock. MaxSamples is
	// small, so that samples are folded while others write and read; a sample a writer brings late can
	// then be older than those already folded: it is refused, and not counted.
	const clusters, writers, samples = 2, 2, 10000
	opts := Options{MaxSamples: 16, MaxErrors: 3}
	s := New(opts)
	readingOf := func(sec int) reading {
		if sec%7 == 0 {
			return broken(fmt.Sprintf("error %d", sec%3)) // as many distinct errors as are kept
		}
		return ok(1)
	}
	recorded := make([][]int, clusters*writers) // the seconds each writer recorded a sample at
	var wg sync.WaitGroup
	begin := make(chan struct{}) // every goroutine starts at once
	for c := range clusters {
		name, scratch := fmt.Sprintf("member-%d", c), fmt.Sprintf("scratch-%d", c)
		var clock atomic.Int64
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-begin
				for {
					sec := int(clock.Add(1) - 1)
					if sec >= samples {
						return
					}
					err := s.record(name, at(float64(sec)), []Workload{web}, []reading{readingOf(sec)})
					switch {
					case err == nil:
						recorded[c*writers+w] = append(recorded[c*writers+w], sec)
					case !strings.Contains(err.Error(), "older than samples already folded"):
						t.Errorf("recording %s at %ds: %v", name, sec, err)
					}
				}
			}()
		}
		wg.Add(2)
		go func() { // a reader of the same cluster
			defer wg.Done()
			<-begin
			var last ClusterSummary
			for range samples {
				got := s.Summary(name, time.Time{}, time.Time{})
				if got.Samples < last.Samples || got.ReadErrors < last.ReadErrors ||
					last.Samples > 0 && (got.FirstSample.After(last.FirstSample) || got.LastSample.Before(last.LastSample)) {
					t.Errorf("%s went back: %d samples from %s to %s (%d read errors) after %d from %s to %s (%d)", name,
						got.Samples, got.FirstSample, got.LastSample, got.ReadErrors, last.Samples, last.FirstSample, last.LastSample, last.ReadErrors)
					return
				}
				last = got
			}
		}()
		go func() { // another cluster, recorded and forgotten over and over
			defer wg.Done()
			<-begin
			for sec := range samples {
				if err := s.record(scratch, at(float64(sec)), []Workload{web}, []reading{readingOf(sec)}); err != nil {
					t.Errorf("recording %s at %ds: %v", scratch, sec, err)
				}
				_ = s.Clusters()
				if sec%50 == 49 {
					s.Forget(scratch)
				}
			}
		}()
	}
	close(begin)
	wg.Wait()

	var names []string
	for c := range clusters {
		name := fmt.Sprintf("member-%d", c)
		names = append(names, name)
		var secs []int
		for w := range writers {
			secs = append(secs, recorded[c*writers+w]...)
		}
		sort.Ints(secs)
		t.Logf("%s: %d of %d samples recorded, the others refused as late", name, len(secs), samples)
		sequential := New(opts)
		for _, sec := range secs {
			if err := sequential.record(name, at(float64(sec)), []Workload{web}, []reading{readingOf(sec)}); err != nil {
				t.Fatal(err)
			}
		}
		got, want := s.Summary(name, time.Time{}, time.Time{}), sequential.Summary(name, time.Time{}, time.Time{})
		if got.Samples != len(secs) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %d samples recorded; concurrent summary\n %+v\nsequential\n %+v", name, len(secs), got, want)
		}
	}
	// The scratch clusters were forgotten after their last sample.
	if got := s.Clusters(); !reflect.DeepEqual(got, names) {
		t.Errorf("clusters %q, want %q", got, names)
	}
}

// A Sampler seeded with the summary another one kept (a restart) continues it: what was seen before
// the restart, a disruption included, stays in the summary, and samples taken after add to it.
func TestSeedContinuesASummary(t *testing.T) {
	before := New(Options{Interval: 5 * time.Second})
	rec(t, before, 0, ok(2))
	rec(t, before, 5, partial(0, 2))
	rec(t, before, 10, ok(2))
	rec(t, before, 15, broken("timeout"))
	kept := before.Summary(cl, time.Time{}, at(15))

	after := New(Options{Interval: 5 * time.Second})
	if !after.Seed(cl, SeedOf(kept)) {
		t.Fatal("a Sampler with nothing of the cluster must take the seed")
	}
	if after.Seed(cl, SeedOf(kept)) {
		t.Fatal("a Sampler that has the cluster's samples must not be seeded again")
	}
	rec(t, after, 20, ok(2))
	rec(t, after, 25, ok(2))
	got := after.Summary(cl, at(0), at(25))
	if got.Samples != 6 || got.FailedSamples != 1 || got.Observed != 5 || got.MinAvailableRatio != 0 ||
		got.UnavailableSeconds < kept.UnavailableSeconds || got.LastFailed || got.FirstSample != at(0) || got.LastSample != at(25) {
		t.Fatalf("continued summary %+v; kept before the restart %+v", got, kept)
	}
}
