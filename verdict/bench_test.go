package verdict

import (
	"encoding/json"
	"runtime"
	"testing"
)

// BenchmarkEvaluateNoDisruption1000Clusters decides noDisruption for a healthy 1,000-cluster wave
// summary under the default policy: compile the policy, encode the evidence, unify, validate.
func BenchmarkEvaluateNoDisruption1000Clusters(b *testing.B) {
	benchmarkWave(b, wave(1000, 0), true)
}

// BenchmarkEvaluateNoDisruption1000ClustersFailing is the same wave with 10 clusters below the
// availability tolerance: the failing path also formats reasons and checks the contract alone.
func BenchmarkEvaluateNoDisruption1000ClustersFailing(b *testing.B) {
	ev := wave(1000, 0)
	for i := 0; i < 1000; i += 100 {
		ev.Clusters[i].SetAvailability(true, 0.5, 0)
	}
	benchmarkWave(b, ev, false)
}

// BenchmarkEvaluateNoDisruption1000ClustersBudget is the same failing wave with a failure budget
// of 20: the default policy counts failures in a comprehension instead of constraining each cluster.
func BenchmarkEvaluateNoDisruption1000ClustersBudget(b *testing.B) {
	ev := wave(1000, 20)
	for i := 0; i < 1000; i += 100 {
		ev.Clusters[i].SetAvailability(true, 0.5, 0)
	}
	benchmarkWave(b, ev, true)
}

func benchmarkWave(b *testing.B, ev NoDisruptionEvidence, pass bool) {
	p := DefaultPolicy()
	data, err := json.Marshal(ev)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		d, err := Evaluate(p, GateNoDisruption, data)
		if err != nil || d.Pass != pass {
			b.Fatalf("pass=%t err=%v reasons=%q", d.Pass, err, d.Reasons)
		}
	}
}

// BenchmarkMemoryFlat10000Evaluations reports the live heap before and after 10,000 evaluations
// (a 20-cluster wave, alternately passing and failing) with the same policy. Every evaluation
// builds a fresh cue.Context, so nothing should accumulate. It runs the 10,000 once however
// large b.N is; the time per op is that of the whole batch.
func BenchmarkMemoryFlat10000Evaluations(b *testing.B) {
	const evaluations = 10000
	before, after := heapAround(b, evaluations)
	b.ReportMetric(float64(before)/(1<<20), "heap-before-MiB")
	b.ReportMetric(float64(after)/(1<<20), "heap-after-MiB")
	b.ReportMetric(float64(int64(after)-int64(before))/(1<<20), "heap-growth-MiB")
}

// heapAround returns the live heap after a GC, before and after n evaluations.
func heapAround(tb testing.TB, n int) (before, after uint64) {
	p := DefaultPolicy()
	good := wave(20, 0)
	bad := wave(20, 0)
	bad.Clusters[7].Ready = false
	docs := [2][]byte{}
	var err error
	if docs[0], err = json.Marshal(good); err != nil {
		tb.Fatal(err)
	}
	if docs[1], err = json.Marshal(bad); err != nil {
		tb.Fatal(err)
	}
	// One evaluation first, so that the package's one-time state (the default policy, the
	// schema sources, CUE's builtin registry) is in "before".
	if _, err := Evaluate(p, GateNoDisruption, docs[0]); err != nil {
		tb.Fatal(err)
	}
	before = liveHeap()
	for i := 0; i < n; i++ {
		d, err := Evaluate(p, GateNoDisruption, docs[i%2])
		if err != nil || d.Pass != (i%2 == 0) {
			tb.Fatalf("evaluation %d: pass=%t err=%v", i, d.Pass, err)
		}
	}
	after = liveHeap()
	return before, after
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestMemoryFlat asserts, generously, that evaluations do not accumulate memory: 500 of them
// may not grow the live heap by 64 MiB (a leak of one context per evaluation would, by far).
func TestMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("500 evaluations")
	}
	before, after := heapAround(t, 500)
	t.Logf("live heap before %.1f MiB, after %.1f MiB", float64(before)/(1<<20), float64(after)/(1<<20))
	if after > before && after-before > 64<<20 {
		t.Fatalf("live heap grew by %.1f MiB over 500 evaluations", float64(after-before)/(1<<20))
	}
}
