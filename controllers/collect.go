package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"sync"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	tgcue "github.com/tidegate/tidegate/cue"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/availability"
	"github.com/tidegate/tidegate/evidence/install"
	"github.com/tidegate/tidegate/evidence/preflight"
)

// Evidence collection bounds.
const (
	// collectTimeout bounds the collection of one gate's evidence.
	collectTimeout = 2 * time.Minute
	// preflightParallel and sampleParallel bound how many member API servers are asked at once.
	preflightParallel = 10
	sampleParallel    = 20
	// maxCachedRenders bounds the rendered packages kept in memory.
	maxCachedRenders = 16
	// installSchemaFile is where a package keeps its install-time schema, relative to its path.
	installSchemaFile = "tidegate/install.cue"
)

// renderedPackage is one revision of the package at the rollout's path, fetched and built once.
type renderedPackage struct {
	Objects []*unstructured.Unstructured
	// RenderErr is kustomize's error; the package is then not deployable (but it was fetched).
	RenderErr error
	// InstallSchema is the content of tidegate/install.cue, nil when the package ships none.
	InstallSchema []byte
}

// renderRevision fetches the artifact a source serves, checks it is the content recorded for the
// revision (digest), and builds the package at the rollout's path. An error means the artifact could
// not be fetched or is not the recorded content; a package that does not build comes back with RenderErr.
// fresh fetches the artifact even when its render is cached: the fetch is the proof that it is served.
func (r *FleetRolloutReconciler) renderRevision(ctx context.Context, fr *v1alpha1.FleetRollout, src sourceState, digest string, fresh bool) (*renderedPackage, error) {
	if !src.Exists {
		return nil, fmt.Errorf("pinned source %s is gone", src.Name)
	}
	if src.URL == "" {
		return nil, fmt.Errorf("pinned source %s serves no artifact: %s", src.Name, src.Message)
	}
	if digest == "" {
		digest = src.Digest
	}
	key := digest + ":" + path.Clean("/"+fr.Spec.Path)
	cached, _ := r.renders.get(key)
	if cached != nil && !fresh {
		return cached, nil
	}
	art, err := r.fetchArtifact(ctx, src.URL, digest)
	if err != nil {
		return nil, fmt.Errorf("pinned source %s: %w", src.Name, err)
	}
	if cached != nil {
		return cached, nil
	}
	p := &renderedPackage{}
	p.Objects, p.RenderErr = art.Render(fr.Spec.Path)
	if b, err := art.FS.ReadFile(path.Join("/", fr.Spec.Path, installSchemaFile)); err == nil {
		p.InstallSchema = b
	}
	r.renders.put(key, p, maxCachedRenders)
	return p, nil
}

// baseEvidence is what every gate's evidence carries.
func baseEvidence(fr *v1alpha1.FleetRollout, wave string, targets []string, now time.Time) tgcue.Evidence {
	e := tgcue.Evidence{
		Rollout:     fr.Namespace + "/" + fr.Name,
		Wave:        wave,
		Candidate:   tgcue.Revision{Revision: fr.Status.Candidate.Revision, Digest: fr.Status.Candidate.Digest},
		Targets:     slices.Sorted(slices.Values(targets)),
		CollectedAt: now.UTC().Truncate(time.Second),
	}
	if kg := fr.Status.LastKnownGood; kg != nil {
		e.KnownGood = &tgcue.Revision{Revision: kg.Revision, Digest: kg.Digest}
	}
	return e
}

// collectDeploySafe gathers the candidate's provenance, its render, its install-time values against
// its install schema, and a preflight of every target of the wave.
func (r *FleetRolloutReconciler) collectDeploySafe(ctx context.Context, fr *v1alpha1.FleetRollout, w *world, wv *v1alpha1.WaveStatus, clusters map[string]*v1alpha1.FleetCluster) tgcue.DeploySafeEvidence {
	ev := tgcue.DeploySafeEvidence{Evidence: baseEvidence(fr, wv.Name, wv.Clusters, w.Now)}
	ev.Source = tgcue.SourceEvidence{Verified: w.Candidate.Verified, Verification: w.Candidate.Verification, Message: w.Candidate.VerifyMessage}

	pkg, err := r.renderRevision(ctx, fr, w.Candidate, fr.Status.Candidate.Digest, false)
	var objs []*unstructured.Unstructured
	switch {
	case err != nil:
		ev.Render.Error = "fetching the candidate: " + err.Error()
	case pkg.RenderErr != nil:
		ev.Render.Error = pkg.RenderErr.Error()
	default:
		ev.Render.OK = true
		objs = pkg.Objects
		sum := evidence.Summarize(objs, tgcue.MaxRenderedObjects)
		ev.Render.Total, ev.Render.Truncated = sum.Total, sum.Truncated
		for _, o := range sum.Objects {
			ev.Render.Objects = append(ev.Render.Objects, tgcue.ObjectRef(o))
		}
	}

	var vars map[string]string
	if pb := fr.Spec.Template.PostBuild; pb != nil {
		vars = pb.Substitute
		if len(pb.SubstituteFrom) > 0 {
			ev.Limits = append(ev.Limits, "install-time values from spec.template.postBuild.substituteFrom (ConfigMaps and Secrets) are not checked against the install schema")
		}
	}
	if pkg != nil {
		in, err := install.Check(pkg.InstallSchema, vars)
		if err != nil {
			in = tgcue.InstallEvidence{Schema: true, Violations: []string{err.Error()}}
		}
		ev.Install = in
	}

	if !ev.Render.OK {
		ev.Limits = append(ev.Limits, "no preflight: the candidate did not render, so there is nothing to ask the clusters about")
		return ev
	}
	objs, err = preflight.Substitute(objs, vars)
	if err != nil {
		ev.Render.OK, ev.Render.Error = false, "postBuild substitution: "+err.Error()
	}
	targets := make([]preflight.Target, 0, len(ev.Targets))
	for _, c := range ev.Targets {
		t := preflight.Target{Name: c}
		if fc := clusters[c]; fc != nil {
			if cfg, err := RESTConfigForCluster(ctx, r.APIReader, r.HubConfig, fc); err == nil {
				t.Config = cfg
			}
		}
		targets = append(targets, t)
	}
	ev.Preflight.Clusters = preflight.CheckAll(ctx, targets, objs, preflight.Options{Force: fr.Spec.Template.Force}, preflightParallel)
	ev.Limits = append(ev.Limits, "the preflight is a server-side dry-run at decision time; admission webhooks and quotas may still decide otherwise when Flux applies")
	return ev
}

// collectRollbackSafe classifies the diff between the rendered known-good and candidate. The
// approvals of the candidate's irreversible changes are returned for the receipt.
func (r *FleetRolloutReconciler) collectRollbackSafe(ctx context.Context, fr *v1alpha1.FleetRollout, w *world, wv *v1alpha1.WaveStatus) (tgcue.RollbackSafeEvidence, []v1alpha1.Approval, error) {
	ev := tgcue.RollbackSafeEvidence{Evidence: baseEvidence(fr, wv.Name, wv.Clusters, w.Now)}
	cand, err := r.renderRevision(ctx, fr, w.Candidate, fr.Status.Candidate.Digest, false)
	if err != nil {
		return ev, nil, fmt.Errorf("the candidate: %w", err)
	}
	if cand.RenderErr != nil {
		return ev, nil, fmt.Errorf("the candidate does not render: %w", cand.RenderErr)
	}
	var good []*unstructured.Unstructured
	if kg := fr.Status.LastKnownGood; kg != nil {
		pkg, err := r.renderRevision(ctx, fr, w.KnownGood, kg.Digest, false)
		if err != nil {
			return ev, nil, fmt.Errorf("the known-good %s: %w", kg.Revision, err)
		}
		if pkg.RenderErr != nil {
			return ev, nil, fmt.Errorf("the known-good %s does not render: %w", kg.Revision, pkg.RenderErr)
		}
		good = pkg.Objects
		if good == nil {
			good = []*unstructured.Unstructured{}
		}
	}
	c := evidence.ClassifyRollback(good, cand.Objects)
	ev.FirstRollout = c.FirstRollout
	ev.PrunedStateful, ev.ChangedStateful, ev.CRDChanges, ev.ImmutableRecreates, ev.Irreversible =
		c.PrunedStateful, c.ChangedStateful, c.CRDChanges, c.ImmutableRecreates, c.Irreversible
	var used []v1alpha1.Approval
	for _, a := range fr.Spec.Approvals {
		if a.Revision == fr.Status.Candidate.Revision && a.Irreversible {
			used = append(used, a)
		}
	}
	if len(used) > 0 {
		for _, l := range [][]tgcue.Finding{ev.PrunedStateful, ev.ChangedStateful, ev.CRDChanges, ev.ImmutableRecreates, ev.Irreversible} {
			for i := range l {
				l[i].Approved = true
			}
		}
	}
	ev.Limits = append(ev.Limits, "the diff compares the rendered packages without the Kustomization template's patches and substitutions")
	return ev, used, nil
}

// collectRollbackSucceeds checks that the known-good's pinned source still serves its recorded
// content and that it renders, and reports the wave's rehearsal when there was one.
func (r *FleetRolloutReconciler) collectRollbackSucceeds(ctx context.Context, fr *v1alpha1.FleetRollout, w *world, wv *v1alpha1.WaveStatus, required bool) tgcue.RollbackSucceedsEvidence {
	ev := tgcue.RollbackSucceedsEvidence{Evidence: baseEvidence(fr, wv.Name, wv.Clusters, w.Now)}
	kg := fr.Status.LastKnownGood
	if kg == nil {
		ev.FirstRollout = true
		return ev
	}
	src := &tgcue.KnownGoodSource{
		Name: kg.Source, Exists: w.KnownGood.Exists, Ready: w.KnownGood.Ready,
		ServedDigest: w.KnownGood.Digest, RecordedDigest: kg.Digest,
	}
	if pkg, err := r.renderRevision(ctx, fr, w.KnownGood, kg.Digest, true); err != nil {
		src.RenderError = err.Error()
	} else if pkg.RenderErr != nil {
		src.RenderError = pkg.RenderErr.Error()
	} else {
		src.Renders = true
	}
	ev.KnownGoodSource = src
	if rh := wv.Rehearsal; rh != nil {
		re := &tgcue.RehearsalEvidence{Required: required, Done: rh.Phase == v1alpha1.RehearsalDone}
		re.Rollback = rehearsalLeg(rh.BackStartedAt, rh.BackReadyAt, w.Now)
		re.Forward = rehearsalLeg(rh.ForwardStartedAt, rh.ForwardReadyAt, w.Now)
		if rh.Message != "" {
			if re.Forward != nil && !re.Forward.OK {
				re.Forward.Message = rh.Message
			} else if re.Rollback != nil && !re.Rollback.OK {
				re.Rollback.Message = rh.Message
			}
		}
		ev.Rehearsal = re
		ev.Limits = append(ev.Limits, "the rehearsal proves the first wave's rollback; later waves' clusters were not rehearsed")
	}
	return ev
}

func rehearsalLeg(started, ready *metav1.Time, now time.Time) *tgcue.RehearsalLeg {
	if started == nil {
		return nil
	}
	if ready == nil {
		return &tgcue.RehearsalLeg{OK: false, Seconds: now.Sub(started.Time).Seconds()}
	}
	return &tgcue.RehearsalLeg{OK: true, Seconds: ready.Sub(started.Time).Seconds()}
}

// collectNoDisruption summarises the wave's soak per cluster: the Kustomization's readiness and health
// checks at the candidate, and the workload availability sampled since the wave was Ready.
func (r *FleetRolloutReconciler) collectNoDisruption(fr *v1alpha1.FleetRollout, w *world, wv *v1alpha1.WaveStatus, soak time.Duration, maxFailures int) tgcue.NoDisruptionEvidence {
	ev := tgcue.NoDisruptionEvidence{
		Evidence:       baseEvidence(fr, wv.Name, wv.Clusters, w.Now),
		Soak:           soak.String(),
		SampleInterval: w.Settings.SampleInterval.String(),
		MaxFailures:    maxFailures,
	}
	cand := fr.Status.Candidate
	var since time.Time
	if wv.ReadyAt != nil {
		since = wv.ReadyAt.Time
	} else if wv.StartedAt != nil {
		since = wv.StartedAt.Time
	}
	summaries := make([]availability.ClusterSummary, 0, len(ev.Targets))
	for _, c := range ev.Targets {
		o := w.Kustomizations[c]
		cc := tgcue.ClusterContinuity{Name: c, Revision: o.LastApplied, HealthChecks: o.Health}
		if cc.HealthChecks == "" {
			cc.HealthChecks = tgcue.HealthChecksUnknown
		}
		cc.Ready = !slices.Contains(wv.Missing, c) &&
			(o.readyAt(cand.Source, cand.Revision) || (wv.Phase == v1alpha1.WaveSoaking && o.stillAt(cand.Source, cand.Revision)))
		s := r.samples(w.Settings.SampleInterval).Summary(sampleKey(fr, c), since, w.Now)
		s.Cluster = c
		summaries = append(summaries, s)
		cc.Samples, cc.MinAvailableRatio, cc.UnavailableSeconds = s.Samples, s.MinAvailableRatio, s.UnavailableSeconds
		ev.Clusters = append(ev.Clusters, cc)
	}
	ev.Limits = append(ev.Limits, availability.Limits(summaries...)...)
	return ev
}

// sampleKey keys a cluster's availability samples by rollout: two rollouts may soak on one cluster.
func sampleKey(fr *v1alpha1.FleetRollout, cluster string) string {
	return fr.Namespace + "/" + fr.Name + "/" + cluster
}

// sampleWave takes one availability sample of every member of a soaking wave, in parallel, from the
// workloads its Kustomization applied (status.inventory).
func (r *FleetRolloutReconciler) sampleWave(ctx context.Context, fr *v1alpha1.FleetRollout, wv *v1alpha1.WaveStatus,
	clusters map[string]*v1alpha1.FleetCluster, existing map[string]*kustomizev1.Kustomization, interval time.Duration, now time.Time) {
	sampler := r.samples(interval)
	sem := make(chan struct{}, sampleParallel)
	var wg sync.WaitGroup
	for _, c := range wv.Clusters {
		fc, ks := clusters[c], existing[c]
		if fc == nil || ks == nil {
			continue // a missing member has no samples, and its evidence says so
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			workloads, _ := availability.WorkloadsFromInventory(ks.Status.Inventory)
			mc, err := r.memberClient(ctx, fc)
			if err != nil {
				// Unreadable: an empty reading list with the error recorded counts as unavailable.
				_ = sampler.Observe(ctx, sampleKey(fr, c), errReader{err}, workloads, now)
				return
			}
			_ = sampler.Observe(ctx, sampleKey(fr, c), mc, workloads, now)
		}()
	}
	wg.Wait()
}

// errReader is a client.Reader that fails every read with err: a member whose client cannot be built.
type errReader struct{ err error }

func (e errReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return e.err
}
func (e errReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return e.err }

// memberClients caches one client per member cluster and kubeconfig content.
type memberClients struct {
	mu      sync.Mutex
	clients map[types.NamespacedName]memberClient
}

type memberClient struct {
	key string
	c   client.Client
}

// memberClient returns a client for the member's API server, built from its kubeconfig Secret and
// rebuilt when the kubeconfig changes.
func (r *FleetRolloutReconciler) memberClient(ctx context.Context, fc *v1alpha1.FleetCluster) (client.Client, error) {
	cfg, err := RESTConfigForCluster(ctx, r.APIReader, r.HubConfig, fc)
	if err != nil {
		return nil, err
	}
	key := configKey(cfg)
	name := types.NamespacedName{Namespace: fc.Namespace, Name: fc.Name}
	r.members.mu.Lock()
	defer r.members.mu.Unlock()
	if m, ok := r.members.clients[name]; ok && m.key == key {
		return m.c, nil
	}
	cfg.Timeout = 10 * time.Second
	c, err := client.New(cfg, client.Options{Scheme: r.Client.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("building a client for cluster %s: %w", fc.Name, err)
	}
	if r.members.clients == nil {
		r.members.clients = map[types.NamespacedName]memberClient{}
	}
	r.members.clients[name] = memberClient{key: key, c: c}
	return c, nil
}

// configKey identifies a rest.Config's endpoint and credentials without keeping them.
func configKey(cfg *rest.Config) string {
	h := sha256.New()
	for _, b := range [][]byte{[]byte(cfg.Host), []byte(cfg.BearerToken), cfg.CertData, cfg.KeyData, cfg.CAData, []byte(cfg.CertFile), []byte(cfg.KeyFile)} {
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
