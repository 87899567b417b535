package controllers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/scheme"
)

// receiptsOnTheHub is how many receipts BenchmarkReceiptCache keeps on the hub, each with
// receiptEvidenceBytes of evidence (a deploySafe receipt of a hundred clusters; the most is 64 KiB).
const (
	receiptsOnTheHub     = 10000
	receiptEvidenceBytes = 16 << 10
	// receiptTargets is each receipt's targets: a wave of 100 clusters.
	receiptTargets = 100
)

// BenchmarkReceiptCache measures the heap a manager's cache of GateReceipts takes with 10,000
// receipts on a real API server: as the controller caches them (trimReceipt: without their
// evidence) and with their evidence kept. Run it alone:
//
//	go test -run '^$' -bench BenchmarkReceiptCache -benchtime 1x ./controllers/
func BenchmarkReceiptCache(b *testing.B) {
	hub := startTestHub(b)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "receipts"}}
	if err := hub.admin.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	createReceipts(b, hub.admin, ns.Name, receiptsOnTheHub, receiptEvidenceBytes)
	b.Logf("%d receipts of %d KiB of evidence created in %s", receiptsOnTheHub, receiptEvidenceBytes>>10, time.Since(began).Round(time.Second))

	for range b.N {
		trimmed := cachedHeap(b, hub, trimReceipt)
		full := cachedHeap(b, hub, keepFieldManagers)
		b.ReportMetric(float64(trimmed)/(1<<20), "MiB-trimmed")
		b.ReportMetric(float64(full)/(1<<20), "MiB-with-evidence")
		b.ReportMetric(float64(full)/float64(max(trimmed, 1)), "ratio")
	}
}

// cachedHeap is the live heap a cache of the hub's GateReceipts, transformed by transform, holds once
// synced: the heap after a collection with the cache, less the heap after one before it.
func cachedHeap(b *testing.B, hub *testHub, transform cache.TransformFunc) uint64 {
	b.Helper()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	c, err := ctrlcache.New(hub.cfg, ctrlcache.Options{Scheme: scheme.New(),
		ByObject: map[client.Object]ctrlcache.ByObject{&v1alpha1.GateReceipt{}: {Transform: transform}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.GetInformer(ctx, &v1alpha1.GateReceipt{}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("the cache did not sync")
	}
	var list v1alpha1.GateReceiptList
	if err := c.List(ctx, &list); err != nil || len(list.Items) != receiptsOnTheHub {
		b.Fatalf("the cache holds %d receipts (%v), want %d", len(list.Items), err, receiptsOnTheHub)
	}
	list = v1alpha1.GateReceiptList{}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

// createReceipts creates n receipts in ns, each with about size bytes of evidence that does not
// compress (receipts keep large evidence gzipped).
func createReceipts(b *testing.B, c client.Client, ns string, n, size int) {
	b.Helper()
	targets := make([]string, receiptTargets)
	for i := range targets {
		targets[i] = fmt.Sprintf("cluster-%04d", i)
	}
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				pad := make([]byte, size*3/4)
				_, _ = rand.Read(pad)
				evidence := fmt.Appendf(nil, `{"n":%d,"pad":%q}`, i, base64.StdEncoding.EncodeToString(pad))
				spec := v1alpha1.GateReceiptSpec{Gate: v1alpha1.GateDeploySafe, Rollout: fmt.Sprintf("r%d", i%50), Wave: "canary",
					Candidate: v1alpha1.RevisionStatus{Revision: "main@sha1:1", Digest: "sha256:" + strings.Repeat("a", 64)},
					Targets:   targets, PolicyDigest: "builtin:sha256:0", Result: v1alpha1.ResultPass, EvaluatedAt: metav1.Now()}
				rc, _, err := v1alpha1.NewGateReceipt(ns, spec, evidence)
				if err == nil {
					err = c.Create(context.Background(), rc)
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}
