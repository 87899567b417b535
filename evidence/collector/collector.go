package collector

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/availability"
	"github.com/tidegate/tidegate/evidence/boundedrender"
	"github.com/tidegate/tidegate/evidence/decrypt"
	"github.com/tidegate/tidegate/internal/member"
	"github.com/tidegate/tidegate/verdict"
	"github.com/tidegate/tidegate/verdict/bounded"
)

// Evidence collection bounds.
const (
	// Timeout bounds the collection of one gate's evidence.
	Timeout = 2 * time.Minute
	// maxCachedRenders bounds the rendered packages kept in memory.
	maxCachedRenders = 16
	// installSchemaFile is where a package keeps its install-time schema, relative to its path.
	installSchemaFile = "tidegate/install.cue"
)

// Collector gathers the evidence the gates decide over: it fetches and renders artifacts from
// source-controller, asks member API servers (preflight, availability samples) and loads policies.
// What it computes from content addressed by digest (renders, compiled policies) it keeps; samples
// live in its samplers.
//
// Besides the collection a gate asks for, it works in the background while a wave soaks (Follow):
// it samples the wave's members on its own ticker, and gathers the next wave's pre-wave evidence
// ahead, so that deciding at the end of the soak is a lookup. That work is tied to the Collector's
// life: it is a manager.Runnable, and Stop ends it. One Collector serves every rollout of a
// controller; it is safe for concurrent use.
type Collector struct {
	// Members reaches member clusters.
	Members *member.Clients
	// Sources reads Flux sources on the hub (the manager's cached client).
	Sources client.Reader
	// Rollouts reads FleetRollouts (the manager's cached client), so that a soak's background work
	// ends when its rollout is gone, suspended or past that wave. nil: it ends only when Follow,
	// Forget or Stop say so.
	Rollouts client.Reader
	// HTTPClient fetches artifacts from source-controller; nil means http.DefaultClient.
	HTTPClient *http.Client
	// PreflightParallel is how many member API servers a preflight asks at once
	// (preflight.DefaultParallel when 0).
	PreflightParallel int
	// SampleParallel is how many members a sampling pass reads at once
	// (availability.DefaultPassParallel when 0).
	SampleParallel int
	// Freshness bounds the age of evidence gathered ahead when a gate uses it (DefaultFreshness
	// when 0); older evidence is collected again.
	Freshness time.Duration
	// Clock is the time samples and evidence are taken at; nil means time.Now.
	Clock func() time.Time
	// PolicyBudget, when set, loads each rollout's policy in a worker process under its budget
	// before it is loaded in-process (compilePolicy); nil loads it in-process only.
	PolicyBudget *bounded.Evaluator
	// RenderBudget, when set, renders each package in a worker process under its budget; nil
	// renders in-process.
	RenderBudget *boundedrender.Renderer
	// Secrets reads the Secrets of rollouts' spec.metrics, from the API server; nil reads none.
	Secrets client.Reader

	answered   answered
	policies   digestCache[*RolloutPolicy]
	renders    digestCache[*renderedPackage]
	samplersMu sync.Mutex
	samplers   map[time.Duration]*availability.Sampler

	bg background

	// chartRenders are the renders of charts with each cluster's values (renderChart).
	chartRenders digestCache[*chartRender]
}

// Collected is one gate's evidence, with the approvals it relied on (for the receipt).
type Collected struct {
	// Evidence is the gate's evidence document, one of the verdict evidence types.
	Evidence any
	// Approvals are the spec.approvals the evidence counted.
	Approvals []v1alpha1.Approval
}

// Collect gathers the evidence of gate for wave i of the scope's rollout, within Timeout. An error
// means the evidence could not be collected; the gate then fails closed, and Evidence holds what was
// gathered before the error.
//
// Evidence gathered ahead for exactly this (the same gate, wave, targets, candidate, known-good,
// sources, rollout generation and policy settings: evidenceKey) while the wave before soaked is
// used once, when it is at most Freshness old; its limits then say when it was gathered. A gathering
// still under way for it is waited for rather than repeated.
func (c *Collector) Collect(ctx context.Context, sc *engine.World, gate string, i int) (Collected, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	if out, ok := c.gatheredAhead(ctx, sc, gate, i); ok {
		return out, nil
	}
	return c.collect(ctx, sc, gate, i)
}

// collect gathers the evidence of gate for wave i now, within ctx.
func (c *Collector) collect(ctx context.Context, sc *engine.World, gate string, i int) (Collected, error) {
	wv := &sc.Rollout.Status.Waves[i]
	var (
		out Collected
		err error
	)
	if err := unread(sc, gate); err != nil {
		return out, err
	}
	collect, ok := collectors[gate]
	if !ok {
		return out, fmt.Errorf("no collector for gate %q", gate)
	}
	out, err = collect(c, ctx, sc, wv, evidenceKey(sc, gate, i))
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: collecting the evidence took longer than %s", ErrUnobserved, Timeout)
	}
	return out, err
}

// collectFunc collects one gate's evidence for wave wv of the world's rollout; key is what the
// evidence is about (evidenceKey).
type collectFunc func(c *Collector, ctx context.Context, sc *engine.World, wv *v1alpha1.WaveStatus, key string) (Collected, error)

// collectors are the collectors of the gates, by the gate's name in the registry (v1alpha1.Gates);
// TestEveryGateHasACollector fails for a gate without one.
var collectors = map[string]collectFunc{
	v1alpha1.GateDeploySafe: func(c *Collector, ctx context.Context, sc *engine.World, wv *v1alpha1.WaveStatus, key string) (Collected, error) {
		ev, err := c.deploySafe(ctx, sc, wv, key)
		return Collected{Evidence: ev}, err
	},
	v1alpha1.GateRollbackSafe: func(c *Collector, ctx context.Context, sc *engine.World, wv *v1alpha1.WaveStatus, _ string) (Collected, error) {
		ev, approvals, err := c.rollbackSafe(ctx, sc, wv)
		return Collected{Evidence: ev, Approvals: approvals}, err
	},
	v1alpha1.GateRollbackSucceeds: func(c *Collector, ctx context.Context, sc *engine.World, wv *v1alpha1.WaveStatus, _ string) (Collected, error) {
		return Collected{Evidence: c.rollbackSucceeds(ctx, sc, wv)}, nil
	},
	v1alpha1.GateNoDisruption: func(c *Collector, ctx context.Context, sc *engine.World, wv *v1alpha1.WaveStatus, _ string) (Collected, error) {
		return Collected{Evidence: c.noDisruption(ctx, sc, wv)}, nil
	},
}

// unread says, wrapping ErrUnobserved, that a pinned source gate's evidence is about could not be
// read (engine.SourceState.ReadError): deploySafe and rollbackSafe are about the candidate,
// rollbackSafe and rollbackSucceeds about the known-good. A source that could not be read is not
// a source that is gone: the gate is Inconclusive, and decided again when it can be read.
func unread(sc *engine.World, gate string) error {
	var sources []engine.SourceState
	switch gate {
	case v1alpha1.GateDeploySafe:
		sources = []engine.SourceState{sc.Candidate}
	case v1alpha1.GateRollbackSafe:
		sources = []engine.SourceState{sc.Candidate, sc.KnownGood}
	case v1alpha1.GateRollbackSucceeds:
		sources = []engine.SourceState{sc.KnownGood}
	}
	for _, s := range sources {
		if s.ReadError != "" {
			return fmt.Errorf("%w: %s", ErrUnobserved, s.ReadError)
		}
	}
	return nil
}

// ErrUnobserved marks a collection error that is about evidence that could not be gathered (a
// fetch that failed, a timeout): the gate is Inconclusive. Other collection errors (a package that
// does not render) are findings: the gate fails.
var ErrUnobserved = errors.New("not observed")

// renderedPackage is one revision of the package, fetched and built once for the rollout's
// Kustomizations (v1alpha1.FleetRollout.BuildSpec), before each cluster's postBuild substitution;
// or, for a rollout of a Helm chart, the chart, rendered with the rollout's values (Chart).
type renderedPackage struct {
	// Build is the kustomize build; nil for a chart.
	Build *evidence.Rendered
	// Chart is the chart of a rollout of a Helm chart (v1alpha1.FleetRollout.IsChart); nil for a
	// kustomize package.
	Chart *chartPackage
	// RenderErr is kustomize's error, or Helm's for a chart that does not render with the rollout's
	// values; the package is then not deployable (but it was fetched).
	RenderErr error
	// InstallSchema is the content of tidegate/install.cue, nil when the package ships none.
	InstallSchema []byte
}

// unfinishedRender is a render that came to no result: it passed the render budget (a
// *bounded.BudgetError inside) or its worker failed. Whether the package builds is not known: the
// gate that needed it is Inconclusive, and the render is tried again the next time.
type unfinishedRender struct{ err error }

func (u *unfinishedRender) Error() string { return u.err.Error() }

func (u *unfinishedRender) Unwrap() error { return u.err }

// renderRevision fetches the artifact a source serves, checks it is the content recorded for the
// revision (digest), and builds it as kustomize-controller builds it for the rollout's
// Kustomizations (v1alpha1.FleetRollout.BuildSpec, decrypted with the Secret of the template's
// decryption), in a worker under RenderBudget when it is set; what ("the candidate") names the
// render in errors. The artifact of a chart's source is the chart archive (a gzipped tarball of
// the chart's directory): it is rendered as helm-controller renders it for the rollout's
// HelmReleases, with the rollout's values (newChartPackage). An error means the artifact could not be fetched or is not the recorded
// content, or, an *unfinishedRender, that the render came to no result (its budget, its worker, or
// a decryption Secret that is missing or does not decrypt the package); a package that does not
// build comes back with RenderErr. fresh fetches the artifact even when its render is cached: the fetch is the
// proof that it is served. Only a finished render is cached.
func (c *Collector) renderRevision(ctx context.Context, fr *v1alpha1.FleetRollout, src engine.SourceState, digest, what string, fresh bool) (*renderedPackage, error) {
	if !src.Exists {
		return nil, fmt.Errorf("pinned source %s is gone", src.Name)
	}
	if src.URL == "" {
		return nil, fmt.Errorf("pinned source %s serves no artifact: %s", src.Name, src.Message)
	}
	if digest == "" {
		digest = src.Digest
	}
	keys, err := c.decryptionKeys(ctx, fr)
	if err != nil {
		return nil, &unfinishedRender{err}
	}
	key, err := renderKey(fr, src.Revision, digest, keys)
	if err != nil {
		return nil, err
	}
	cached, _ := c.renders.get(key)
	if cached != nil && !fresh {
		return cached, nil
	}
	art, data, err := c.fetchArtifact(ctx, src.URL, digest)
	if err != nil {
		return nil, fmt.Errorf("pinned source %s: %w", src.Name, err)
	}
	if cached != nil {
		return cached, nil
	}
	if fr.IsChart() {
		p, err := c.newChartPackage(ctx, fr, src.Revision, key, data, art, what)
		if err != nil {
			return nil, err
		}
		c.renders.put(key, p, maxCachedRenders)
		return p, nil
	}
	p := &renderedPackage{}
	if c.RenderBudget != nil {
		p.Build, p.RenderErr, err = c.RenderBudget.Render(ctx, "rendering "+what, art, fr.BuildSpec(), keys)
	} else {
		p.Build, p.RenderErr = decrypt.Render(art, fr.BuildSpec(), keys)
	}
	if err := decryptionUnfinished(keys, p.RenderErr, err); err != nil {
		return nil, err
	}
	if b, err := art.FS.ReadFile(path.Join("/", fr.Spec.Path, installSchemaFile)); err == nil {
		p.InstallSchema = b
	}
	c.renders.put(key, p, maxCachedRenders)
	return p, nil
}

// RenderDigest is the digest of what kustomize builds for fr's Kustomizations (spec.path with the
// template's build fields, before substitution) from the artifact src serves, which must be digest
// ("" for src's own). Equal digests, under the same template and values, are the same objects for
// every cluster. A package that does not build has none: the error says why.
func (c *Collector) RenderDigest(ctx context.Context, fr *v1alpha1.FleetRollout, src engine.SourceState, digest string) (string, error) {
	p, err := c.renderRevision(ctx, fr, src, digest, "the revision "+src.Revision, false)
	if err != nil {
		return "", err
	}
	if p.RenderErr != nil {
		return "", p.RenderErr
	}
	if p.Chart != nil {
		return chartDigest(p.Chart.shared)
	}
	return p.Build.Digest(), nil
}

// renderKey keys a render by the content, by what of the rollout decides the build (for a chart,
// spec.chart and the source's artifact revision, which is in the chart's version, too), and by
// the decryption keys it decrypts with (their digest).
func renderKey(fr *v1alpha1.FleetRollout, revision, digest string, keys *evidence.Keys) (string, error) {
	spec := fr.BuildSpec()
	spec.Path = path.Clean("/" + spec.Path)
	b, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("encoding the build of %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	if fr.IsChart() {
		b = append(b, chartKey(fr, revision)...)
	}
	sum := sha256.Sum256(append(b, keys.Digest()...))
	return digest + ":" + hex.EncodeToString(sum[:16]), nil
}

// objectsOf is what cluster fc's Kustomization applies from pkg (fc nil: a cluster without
// values of its own): the build substituted with its postBuild. For a chart it is the release's
// objects as helm-controller renders them with the cluster's values (renderChart; the CRDs of
// the chart's crds/ directory and its hooks are not among them); a render that came to no result
// is an *unfinishedRender.
func (c *Collector) objectsOf(ctx context.Context, fr *v1alpha1.FleetRollout, fc *v1alpha1.FleetCluster, pkg *renderedPackage) ([]*unstructured.Unstructured, error) {
	if pkg.Chart == nil {
		return pkg.Build.Substitute(fr.PostBuild(fc))
	}
	if fc == nil || len(fc.Spec.Values) == 0 {
		return pkg.Chart.shared.Objects, nil
	}
	r, renderErr, err := c.renderChart(ctx, fr, fc, pkg.Chart, "the chart with cluster "+fc.Name+"'s values")
	if err != nil {
		return nil, err
	}
	if renderErr != nil {
		return nil, renderErr
	}
	return r.Objects, nil
}

// baseEvidence is what every gate's evidence carries.
func baseEvidence(fr *v1alpha1.FleetRollout, wave string, targets []string, now time.Time) verdict.Evidence {
	e := verdict.Evidence{
		Rollout:     fr.Namespace + "/" + fr.Name,
		Wave:        wave,
		Candidate:   verdict.Revision{Revision: fr.Status.Candidate.Revision, Digest: fr.Status.Candidate.Digest},
		Targets:     slices.Sorted(slices.Values(targets)),
		CollectedAt: now.UTC().Truncate(time.Second),
	}
	if kg := fr.Status.LastKnownGood; kg != nil {
		e.KnownGood = &verdict.Revision{Revision: kg.Revision, Digest: kg.Digest}
	}
	return e
}

// sampleKey keys a cluster's availability samples by what they measure: the rollout (two rollouts
// may soak on one cluster), its candidate and the wave. A sample of one candidate's wave never
// counts for another's.
func sampleKey(fr *v1alpha1.FleetRollout, wave, cluster string) string {
	var candidate string
	if fr.Status.Candidate != nil {
		candidate = fr.Status.Candidate.Key()
	}
	return sampleKeyOf(types.NamespacedName{Namespace: fr.Namespace, Name: fr.Name}, candidate, wave, cluster)
}

func sampleKeyOf(rollout types.NamespacedName, candidate, wave, cluster string) string {
	return rollout.Namespace + "/" + rollout.Name + "/" + candidate + "/" + wave + "/" + cluster
}

// Forget ends the background work for wave i (its noDisruption is decided) and drops its members'
// samples. Evidence gathered ahead for the next wave is kept until it is used or too old.
func (c *Collector) Forget(sc *engine.World, i int) {
	wv := &sc.Rollout.Status.Waves[i]
	sampler := c.waveSampler(sc, i)
	c.endSoak(sc.Rollout.UID, wv.Name)
	for _, name := range wv.Clusters {
		sampler.Forget(sampleKey(sc.Rollout, wv.Name, name))
	}
}

// waveSampler is the sampler wave i of the scope's rollout is sampled into: the one of the sample
// interval its soak began with, while its soak loop runs, else the policy's. A policy whose
// sampleInterval changes mid-soak (a commit, or a load error that falls back to the built-in
// settings) changes the interval from the next soak on; the samples of this one are kept.
func (c *Collector) waveSampler(sc *engine.World, i int) *availability.Sampler {
	return c.samples(c.waveInterval(sc, sc.Rollout.Status.Waves[i].Name))
}

// waveInterval is the sample interval of the soak of the wave named wave (waveSampler).
func (c *Collector) waveInterval(sc *engine.World, wave string) time.Duration {
	fr := sc.Rollout
	if fr.Status.Candidate != nil {
		id := soakID{rollout: fr.UID, candidate: fr.Status.Candidate.Key(), wave: wave}
		c.bg.mu.Lock()
		s := c.bg.soaks[fr.UID]
		c.bg.mu.Unlock()
		if s != nil && s.id == id {
			return s.getPlan().interval
		}
	}
	return sc.Settings.SampleInterval
}

// samples returns the availability sampler for a sample interval (policies may differ), made on
// first use. Samples are keyed by rollout, candidate, wave and cluster (sampleKey).
func (c *Collector) samples(interval time.Duration) *availability.Sampler {
	c.samplersMu.Lock()
	defer c.samplersMu.Unlock()
	if c.samplers == nil {
		c.samplers = map[time.Duration]*availability.Sampler{}
	}
	s := c.samplers[interval]
	if s == nil {
		s = availability.New(availability.Options{Interval: interval})
		c.samplers[interval] = s
	}
	return s
}

func (c *Collector) now() time.Time {
	if c.Clock != nil {
		return c.Clock()
	}
	return time.Now()
}
