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
	"k8s.io/apimachinery/pkg/api/meta"
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
	// receiptTargets is each receipt's targets: a wave of 1,000 clusters.
	receiptTargets = 1000
)

// BenchmarkReceiptCache measures the heap a manager's cache of GateReceipts takes with 10,000
// receipts of a 1,000-cluster wave on a real API server: as the controller caches them (their
// metadata only, FleetRolloutReconciler.Receipts), whole but for their evidence, and whole. Run
// it alone:
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

	withoutEvidence := func(obj any) (any, error) {
		if rc, ok := obj.(*v1alpha1.GateReceipt); ok {
			rc.Spec.Evidence, rc.Spec.EvidenceGzip = nil, ""
		}
		return obj, nil
	}
	for range b.N {
		metadata := cachedHeap(b, hub, true, nil)
		spec := cachedHeap(b, hub, false, withoutEvidence)
		whole := cachedHeap(b, hub, false, nil)
		b.ReportMetric(float64(metadata)/(1<<20), "MiB-metadata")
		b.ReportMetric(float64(spec)/(1<<20), "MiB-without-evidence")
		b.ReportMetric(float64(whole)/(1<<20), "MiB-whole")
		b.ReportMetric(float64(whole)/float64(max(metadata, 1)), "ratio")
	}
}

// cachedHeap is the live heap a cache of the hub's GateReceipts holds once synced (their metadata
// only, or whole and transformed by transform; managedFields stripped, as the manager does): the
// heap after a collection with the cache, less the heap after one before it.
func cachedHeap(b *testing.B, hub *testHub, metadataOnly bool, transform cache.TransformFunc) uint64 {
	b.Helper()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	c, err := ctrlcache.New(hub.cfg, ctrlcache.Options{Scheme: scheme.New(), DefaultTransform: ctrlcache.TransformStripManagedFields(),
		ByObject: map[client.Object]ctrlcache.ByObject{&v1alpha1.GateReceipt{}: {Transform: transform}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	// The cache is stopped before the next is measured: one still running would count in the
	// next one's heap before it and be freed after, and take its size off the next figure.
	defer func() { cancel(); <-stopped }()
	var obj client.Object = &v1alpha1.GateReceipt{}
	var list client.ObjectList = &v1alpha1.GateReceiptList{}
	if metadataOnly {
		obj, list = &metav1.PartialObjectMetadata{}, receiptMetadataList()
		obj.GetObjectKind().SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(v1alpha1.GateReceiptKind))
	}
	if _, err := c.GetInformer(ctx, obj); err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.Start(ctx); close(stopped) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("the cache did not sync")
	}
	if err := c.List(ctx, list); err != nil || meta.LenList(list) != receiptsOnTheHub {
		b.Fatalf("the cache holds %d receipts (%v), want %d", meta.LenList(list), err, receiptsOnTheHub)
	}
	list = nil
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
					rc.Annotations[ReceiptGenerationAnnotation] = "1"
					annotateDecision(rc)
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
