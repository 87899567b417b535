package collector

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/fleets"
	"github.com/tidegate/tidegate/internal/member"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
	"github.com/tidegate/tidegate/verdict"
)

// One real API server (envtest) plays the hub, where FleetRollouts live, and every member: a
// FleetCluster without spec.kubeConfig is the hub itself. envErr says why it is not there; every
// test that needs it fails with that error, it never skips.
var (
	hubConfig  *rest.Config
	k8s        client.Client
	testScheme *runtime.Scheme
	envErr     error
)

func TestMain(m *testing.M) {
	if testenv.Fuzzing() {
		os.Exit(m.Run())
	}
	os.Exit(testenv.RunWithEnvironment(m, func() (*envtest.Environment, error) {
		log.SetLogger(logr.Discard())
		testScheme = scheme.New()
		e, err := testbin.NewEnvironment("", testbin.TidegateCRDs)
		if err != nil {
			envErr = err
			return nil, err
		}
		if hubConfig, err = e.Start(); err != nil {
			_ = e.Stop()
			envErr = fmt.Errorf("starting envtest: %w", err)
			return nil, envErr
		}
		k8s, envErr = client.New(hubConfig, client.Options{Scheme: testScheme})
		return e, envErr
	}))
}

// clock is a settable clock for the ages of evidence.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// world is a rollout soaking its first wave on real API objects: a namespace holding an available
// Deployment (the members' workload), the FleetRollout with its status, FleetClusters of the hub
// itself, their Kustomizations (in memory: the collector reads their inventories from the Scope),
// and an artifact server serving the candidate.
type world struct {
	ns       string
	rollout  *v1alpha1.FleetRollout
	clusters []string
	scope    *engine.World
	fetches  *int64
}

const testPackage = `apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: NS
data:
  greeting: hello
`

// newWorld sets up a rollout of waves canary (1 cluster) and rest, over n clusters, with the canary
// soaking since readyAgo for soak, sampled every interval.
func newWorld(t testing.TB, n int, interval, soak, readyAgo time.Duration, now time.Time) *world {
	t.Helper()
	if envErr != nil {
		t.Fatalf("no API server: %v", envErr)
	}
	ctx := context.Background()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "collector-"}}
	if err := k8s.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), nsObj) })

	createAvailableWeb(t, k8s, ns)

	art, digest := tarball(t, map[string]string{
		"app/kustomization.yaml": "resources: [config.yaml]\n",
		"app/config.yaml":        testPackage,
	}, ns)
	var fetches int64
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		fetches++
		mu.Unlock()
		_, _ = w.Write(art)
	}))
	t.Cleanup(srv.Close)

	one := int32(1)
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"},
			Path:      "./app",
			Waves: []v1alpha1.Wave{
				{Name: "canary", Count: &one, Soak: &metav1.Duration{Duration: soak}},
				{Name: "rest", Selector: &metav1.LabelSelector{}},
			},
		},
	}
	if err := k8s.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}
	w := &world{ns: ns, fetches: &fetches}
	fcs := make([]v1alpha1.FleetCluster, n)
	clusters := map[string]*v1alpha1.FleetCluster{}
	objects := map[string]*kustomizev1.Kustomization{}
	for i := range fcs {
		name := fmt.Sprintf("member-%d", i+1)
		w.clusters = append(w.clusters, name)
		fcs[i] = v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Generation: 1,
			Labels: map[string]string{"index": fmt.Sprint(i + 1)}}}
		clusters[name] = &fcs[i]
		objects[name] = &kustomizev1.Kustomization{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-" + name, ResourceVersion: "1"},
			Status: kustomizev1.KustomizationStatus{Inventory: &kustomizev1.ResourceInventory{Entries: []kustomizev1.ResourceRef{
				{ID: ns + "_web_apps_Deployment", Version: "v1"}, {ID: ns + "_web-config__ConfigMap", Version: "v1"},
			}}},
		}
	}
	inv := fleets.InventoryFrom(fcs)
	plan, err := fleets.Plan(fleets.Input{Rollout: fr, Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	cand := &v1alpha1.RevisionStatus{Revision: "main@sha1:c0ffee", Source: "web-c0ffee", Digest: digest}
	ready := metav1.NewTime(now.Add(-readyAgo))
	fr.Status = v1alpha1.FleetRolloutStatus{
		Phase: v1alpha1.PhaseProgressing, Candidate: cand, CurrentWave: "canary",
		Waves: []v1alpha1.WaveStatus{
			{Name: "canary", Phase: v1alpha1.WaveSoaking, Clusters: plan.Waves[0].Clusters, StartedAt: &ready, ReadyAt: &ready},
			{Name: "rest", Phase: v1alpha1.WavePending},
		},
	}
	if err := k8s.Status().Update(ctx, fr); err != nil {
		t.Fatal(err)
	}
	w.rollout = fr
	w.scope = &engine.World{
		Rollout: fr.DeepCopy(), Clusters: clusters, Inventory: inv, Plan: plan, Objects: engine.Members(objects),
		Candidate: engine.SourceState{Name: cand.Source, Exists: true, Ready: true, Revision: cand.Revision, Digest: digest, URL: srv.URL + "/web.tar.gz"},
		Settings:  verdict.Settings{SampleInterval: interval, Soak: soak},
		Now:       now,
	}
	return w
}

// createAvailableWeb creates Deployment web in ns with its status saying it is fully available.
func createAvailableWeb(t testing.TB, c client.Client, ns string) {
	t.Helper()
	ctx := context.Background()
	one := int32(1)
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.com/web:v1"}}}}},
	}
	if err := c.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	web.Status = appsv1.DeploymentStatus{Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, ObservedGeneration: web.Generation}
	if err := c.Status().Update(ctx, web); err != nil {
		t.Fatal(err)
	}
}

// decision is the scope of the pass that decides the next wave's pre-wave gates at now: the canary
// succeeded, and the rest wave's members are snapshotted as the step snapshots them.
func (w *world) decision(t testing.TB, now time.Time) *engine.World {
	t.Helper()
	sc := *w.scope
	sc.Rollout = w.scope.Rollout.DeepCopy()
	st := &sc.Rollout.Status
	st.Waves[0].Phase = v1alpha1.WaveSucceeded
	members, err := fleets.Members(fleets.Input{Rollout: sc.Rollout, Inventory: sc.Inventory}, st.Waves[:1], "rest")
	if err != nil {
		t.Fatal(err)
	}
	st.Waves[1].Clusters = members
	sc.Now = now
	return &sc
}

// newCollector is a Collector of the hub (and its members), with its background work stopped when t ends.
func newCollector(t testing.TB, clk *clock) *Collector {
	t.Helper()
	c := &Collector{
		Members:  &member.Clients{Secrets: k8s, Hub: hubConfig, Scheme: testScheme},
		Sources:  k8s,
		Rollouts: k8s,
	}
	if clk != nil {
		c.Clock = clk.Now
	}
	t.Cleanup(c.Stop)
	return c
}

// tarball is a gzipped artifact of files (NS replaced by ns) and its digest.
func tarball(t testing.TB, files map[string]string, ns string) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range files {
		body = string(bytes.ReplaceAll([]byte(body), []byte("NS"), []byte(ns)))
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), "sha256:" + hex.EncodeToString(sum[:])
}

// eventually polls cond every 20ms for up to 20s.
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20s: %s", what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// soaking says whether the collector has a soak loop for the rollout.
func (c *Collector) soaking(fr *v1alpha1.FleetRollout) bool {
	c.bg.mu.Lock()
	defer c.bg.mu.Unlock()
	return c.bg.soaks[fr.UID] != nil
}

// aheadOf returns the evidence gathered ahead for gate of the rollout, nil when there is none.
func (c *Collector) aheadOf(fr *v1alpha1.FleetRollout, gate string) *gathered {
	c.bg.mu.Lock()
	defer c.bg.mu.Unlock()
	return c.bg.ahead[aheadID{rollout: fr.UID, gate: gate}]
}
