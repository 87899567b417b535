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
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/availability"
	"github.com/tidegate/tidegate/evidence/boundedrender"
	"github.com/tidegate/tidegate/evidence/preflight"
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

	answered   answered
	policies   digestCache[*RolloutPolicy]
	renders    digestCache[*renderedPackage]
	samplersMu sync.Mutex
	samplers   map[time.Duration]*availability.Sampler

	bg background
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
func (c *Collector) Collect(ctx context.Context, sc *Scope, gate string, i int) (Collected, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	if out, ok := c.gatheredAhead(ctx, sc, gate, i); ok {
		return out, nil
	}
	return c.collect(ctx, sc, gate, i)
}

// collect gathers the evidence of gate for wave i now, within ctx.
func (c *Collector) collect(ctx context.Context, sc *Scope, gate string, i int) (Collected, error) {
	wv := &sc.Rollout.Status.Waves[i]
	var (
		out Collected
		err error
	)
	switch gate {
	case v1alpha1.GateDeploySafe:
		out.Evidence, err = c.deploySafe(ctx, sc, wv, evidenceKey(sc, gate, i))
	case v1alpha1.GateRollbackSafe:
		out.Evidence, out.Approvals, err = c.rollbackSafe(ctx, sc, wv)
	case v1alpha1.GateRollbackSucceeds:
		out.Evidence = c.rollbackSucceeds(ctx, sc, wv)
	case v1alpha1.GateNoDisruption:
		out.Evidence = c.noDisruption(sc, wv)
	default:
		return out, fmt.Errorf("no collector for gate %q", gate)
	}
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: collecting the evidence took longer than %s", ErrUnobserved, Timeout)
	}
	return out, err
}

// ErrUnobserved marks a collection error that is about evidence that could not be gathered (a
// fetch that failed, a timeout): the gate is Inconclusive. Other collection errors (a package that
// does not render) are findings: the gate fails.
var ErrUnobserved = errors.New("not observed")

// renderedPackage is one revision of the package, fetched and built once for the rollout's
// Kustomizations (v1alpha1.FleetRollout.BuildSpec), before each cluster's postBuild substitution.
type renderedPackage struct {
	Build *evidence.Rendered
	// RenderErr is kustomize's error; the package is then not deployable (but it was fetched).
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
// Kustomizations (spec.path, the template's targetNamespace, patches and images), in a worker
// under RenderBudget when it is set; what ("the candidate") names the render in errors. An error
// means the artifact could not be fetched or is not the recorded content, or, an
// *unfinishedRender, that the render came to no result; a package that does not build comes back
// with RenderErr. fresh fetches the artifact even when its render is cached: the fetch is the
// proof that it is served. Only a finished render is cached.
func (c *Collector) renderRevision(ctx context.Context, fr *v1alpha1.FleetRollout, src SourceState, digest, what string, fresh bool) (*renderedPackage, error) {
	if !src.Exists {
		return nil, fmt.Errorf("pinned source %s is gone", src.Name)
	}
	if src.URL == "" {
		return nil, fmt.Errorf("pinned source %s serves no artifact: %s", src.Name, src.Message)
	}
	if digest == "" {
		digest = src.Digest
	}
	key, err := renderKey(fr, digest)
	if err != nil {
		return nil, err
	}
	cached, _ := c.renders.get(key)
	if cached != nil && !fresh {
		return cached, nil
	}
	art, err := c.fetchArtifact(ctx, src.URL, digest)
	if err != nil {
		return nil, fmt.Errorf("pinned source %s: %w", src.Name, err)
	}
	if cached != nil {
		return cached, nil
	}
	p := &renderedPackage{}
	if c.RenderBudget != nil {
		p.Build, p.RenderErr, err = c.RenderBudget.Render(ctx, "rendering "+what, art, fr.BuildSpec())
		if err != nil {
			return nil, &unfinishedRender{err}
		}
	} else {
		p.Build, p.RenderErr = art.Render(fr.BuildSpec())
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
func (c *Collector) RenderDigest(ctx context.Context, fr *v1alpha1.FleetRollout, src SourceState, digest string) (string, error) {
	p, err := c.renderRevision(ctx, fr, src, digest, "the revision "+src.Revision, false)
	if err != nil {
		return "", err
	}
	if p.RenderErr != nil {
		return "", p.RenderErr
	}
	return p.Build.Digest(), nil
}

// renderKey keys a render by the content and by what of the rollout decides the build.
func renderKey(fr *v1alpha1.FleetRollout, digest string) (string, error) {
	spec := fr.BuildSpec()
	spec.Path = path.Clean("/" + spec.Path)
	b, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("encoding the build of %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	sum := sha256.Sum256(b)
	return digest + ":" + hex.EncodeToString(sum[:16]), nil
}

// objectsOf is what cluster fc's Kustomization applies from pkg (fc nil: a cluster without
// values of its own): the build substituted with its postBuild.
func objectsOf(fr *v1alpha1.FleetRollout, fc *v1alpha1.FleetCluster, pkg *renderedPackage) ([]*unstructured.Unstructured, error) {
	return pkg.Build.Substitute(fr.PostBuild(fc))
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

// deploySafe gathers the candidate's provenance, its render, its install-time values (the
// rollout's, and each target's own) against its install schema, and a preflight of every target of
// the wave, with the objects as its Kustomization substitutes them and the wave's failure budget.
// The first wave's preflight also covers every later wave's planned targets (laterWaves), so that
// a cluster that cannot take the candidate is found before the canary runs it.
func (c *Collector) deploySafe(ctx context.Context, sc *Scope, wv *v1alpha1.WaveStatus, key string) (verdict.DeploySafeEvidence, error) {
	fr := sc.Rollout.Built(sc.Rollout.Status.Candidate.Build)
	ev := verdict.DeploySafeEvidence{Evidence: baseEvidence(fr, wv.Name, wv.Clusters, sc.Now)}
	ev.Preflight.MaxFailures = maxFailuresOf(fr.WaveSpec(wv.Name))
	later := laterWaves(sc, wv)
	ev.Source = sourceEvidence(sc.Candidate)
	if src := sc.Candidate; src.VerifyFailed {
		if !SignatureRefused(src.VerifyMessage) {
			// The verification did not run to a verdict: nothing is known of the signature yet.
			ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Reason: "source-controller could not verify the candidate's signature: " + src.VerifyMessage})
			ev.Render.Error = "the candidate is not served until its signature is verified"
			return ev, fmt.Errorf("%w: source-controller could not verify the signature of the candidate (pinned source %s): %s", ErrUnobserved, src.Name, src.VerifyMessage)
		}
		// A verdict: the candidate is refused, and no artifact of it will ever be served. That is
		// known, not unobserved: the gate decides on it now.
		ev.Render.Error = "source-controller refused the candidate's signature and serves no artifact of it"
		ev.Limits = append(ev.Limits, "no render and no preflight: source-controller refused the candidate, so there is nothing to build or to ask the clusters about")
		return ev, nil
	}

	pkg, err := c.renderRevision(ctx, fr, sc.Candidate, fr.Status.Candidate.Digest, "the candidate", false)
	var objs []*unstructured.Unstructured
	var unfinished *unfinishedRender
	switch {
	case errors.As(err, &unfinished):
		// Not observed: whether the candidate builds is not known until a render finishes.
		ev.Render.Error = err.Error()
		ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Reason: err.Error()})
	case err != nil:
		ev.Render.Error = "fetching the candidate: " + err.Error()
		// Not observed: the gate is Inconclusive until the artifact can be fetched again.
		ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Reason: "fetching the candidate's artifact failed: " + err.Error()})
	case pkg.RenderErr != nil:
		ev.Render.Error = pkg.RenderErr.Error()
	default:
		// The objects a cluster without values of its own applies.
		if objs, err = objectsOf(fr, nil, pkg); err != nil {
			ev.Render.Error = "postBuild substitution: " + err.Error()
			break
		}
		ev.Render.OK = true
		sum := evidence.Summarize(objs, verdict.MaxRenderedObjects)
		ev.Render.Total, ev.Render.Truncated = sum.Total, sum.Truncated
		for _, o := range sum.Objects {
			ev.Render.Objects = append(ev.Render.Objects, verdict.ObjectRef(o))
		}
	}
	ev.Limits = append(ev.Limits, substituteFromLimits(fr)...)
	values := valuesOf(fr, ev.Targets, sc.Clusters)
	if pkg != nil {
		ev.Install = values.check(pkg.InstallSchema)
	}

	if !ev.Render.OK {
		ev.Limits = append(ev.Limits, "no preflight: the candidate did not render, so there is nothing to ask the clusters about")
		return ev, nil
	}
	names := slices.Clone(ev.Targets)
	for _, lw := range later {
		names = append(names, lw.Clusters...)
	}
	results, reused, oldest := c.recheck(sc, key, names, len(ev.Targets), func(names []string) []verdict.ClusterPreflight {
		return c.preflight(ctx, sc, names, pkg, objs, preflight.Options{Force: fr.Spec.Template.Force})
	})
	if reused > 0 {
		ev.Limits = append(ev.Limits, c.reusedLimit(reused, len(names), oldest, sc.Now))
	}
	for _, r := range results[:len(ev.Targets)] {
		if !r.Reachable {
			ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Name: r.Name, Reason: "preflight: " + r.Problem()})
		}
	}
	ev.Preflight.WavePreflight = verdict.NewWavePreflight("", ev.Preflight.MaxFailures, results[:len(ev.Targets)])
	results = results[len(ev.Targets):]
	var away []string
	for _, lw := range later {
		// A later wave's cluster that does not answer now is its own wave's business: that wave
		// holds on it when it is due. What the first wave looks for in the later ones is a cluster
		// that cannot take the candidate.
		answered := make([]verdict.ClusterPreflight, 0, len(lw.Clusters))
		for _, r := range results[:len(lw.Clusters)] {
			if r.Reachable {
				answered = append(answered, r)
			} else {
				away = append(away, r.Name)
			}
		}
		ev.Preflight.LaterWaves = append(ev.Preflight.LaterWaves, verdict.NewWavePreflight(lw.Name, lw.MaxFailures, answered))
		results = results[len(lw.Clusters):]
	}
	if len(away) > 0 {
		ev.Limits = append(ev.Limits, fmt.Sprintf("%d clusters of later waves did not answer the preflight (%s): they are not judged here; their own wave's deploySafe checks them before it starts, and holds while they do not answer",
			len(away), firstOf(away)))
	}
	ev.Limits = append(ev.Limits, "the preflight is a server-side dry-run at decision time; admission webhooks and quotas may still decide otherwise when Flux applies")
	if len(later) > 0 {
		ev.Limits = append(ev.Limits, "the later waves' preflight covers the clusters planned for them now; each wave is checked again, on its own members, before it starts")
	}
	return ev, nil
}

// sourceEvidence is the candidate's provenance as its pinned source reports it. Its verification
// is the one of the source's current spec, which pins one digest or commit: what is verified is
// the revision the source serves, and a refused one is never served.
func sourceEvidence(src SourceState) verdict.SourceEvidence {
	ev := verdict.SourceEvidence{Verified: src.Verified, Verification: src.Verification, Message: src.VerifyMessage}
	if src.Verified {
		ev.Revision = src.Revision
	}
	return ev
}

// plannedWave is a wave after the one a first wave's deploySafe is about, as planned now.
type plannedWave struct {
	Name        string
	MaxFailures int
	Clusters    []string
}

// laterWaves are the waves after wv with the clusters today's plan gives them, when wv is the
// first wave (else none): its deploySafe preflights the whole fleet.
func laterWaves(sc *Scope, wv *v1alpha1.WaveStatus) []plannedWave {
	waves := sc.Rollout.Status.Waves
	if len(waves) < 2 || waves[0].Name != wv.Name {
		return nil
	}
	taken := make(map[string]bool, len(wv.Clusters))
	for _, c := range wv.Clusters {
		taken[c] = true
	}
	var out []plannedWave
	for _, w := range waves[1:] {
		lw := plannedWave{Name: w.Name, MaxFailures: maxFailuresOf(sc.Rollout.WaveSpec(w.Name))}
		for _, pw := range sc.Plan.Waves {
			if pw.Name != w.Name {
				continue
			}
			for _, c := range pw.Clusters {
				if !taken[c] {
					taken[c] = true
					lw.Clusters = append(lw.Clusters, c)
				}
			}
		}
		out = append(out, lw)
	}
	return out
}

// maxFailuresOf is a wave's failure budget: its spec's maxFailures, else 0.
func maxFailuresOf(spec v1alpha1.Wave) int {
	if spec.MaxFailures != nil {
		return int(*spec.MaxFailures)
	}
	return 0
}

// rollbackSafe classifies the diff between the rendered known-good and candidate. The
// approvals of the candidate's irreversible changes are returned for the receipt.
func (c *Collector) rollbackSafe(ctx context.Context, sc *Scope, wv *v1alpha1.WaveStatus) (verdict.RollbackSafeEvidence, []v1alpha1.Approval, error) {
	fr := sc.Rollout.Built(sc.Rollout.Status.Candidate.Build)
	ev := verdict.RollbackSafeEvidence{Evidence: baseEvidence(fr, wv.Name, wv.Clusters, sc.Now)}
	var unfinished *unfinishedRender
	cand, err := c.renderRevision(ctx, fr, sc.Candidate, fr.Status.Candidate.Digest, "the candidate", false)
	if errors.As(err, &unfinished) {
		return ev, nil, fmt.Errorf("%w: %w", ErrUnobserved, err)
	}
	if err != nil {
		return ev, nil, fmt.Errorf("%w: the candidate: %w", ErrUnobserved, err)
	}
	if cand.RenderErr != nil {
		return ev, nil, fmt.Errorf("the candidate does not render: %w", cand.RenderErr)
	}
	var good *renderedPackage
	goodFR := fr
	if kg := fr.Status.LastKnownGood; kg != nil {
		// The known-good as its clusters run it: with its own build, which a template edit changed.
		goodFR = sc.Rollout.Built(kg.Build)
		pkg, err := c.renderRevision(ctx, goodFR, sc.KnownGood, kg.Digest, "the known-good "+kg.Revision, false)
		if errors.As(err, &unfinished) {
			return ev, nil, fmt.Errorf("%w: %w", ErrUnobserved, err)
		}
		if err != nil {
			return ev, nil, fmt.Errorf("%w: the known-good %s: %w", ErrUnobserved, kg.Revision, err)
		}
		if pkg.RenderErr != nil {
			return ev, nil, fmt.Errorf("the known-good %s does not render: %w", kg.Revision, pkg.RenderErr)
		}
		good = pkg
	}
	diff, err := classifyEach(goodFR, fr, ev.Targets, sc.Clusters, good, cand)
	if err != nil {
		return ev, nil, err
	}
	ev.FirstRollout = diff.FirstRollout
	ev.PrunedStateful, ev.ChangedStateful, ev.CRDChanges, ev.ImmutableRecreates, ev.Irreversible =
		diff.PrunedStateful, diff.ChangedStateful, diff.CRDChanges, diff.ImmutableRecreates, diff.Irreversible
	var used []v1alpha1.Approval
	for _, a := range fr.Spec.Approvals {
		if a.Irreversible && fr.ApprovesCandidate(a, fr.Status.Candidate) {
			used = append(used, a)
		}
	}
	if len(used) > 0 {
		for _, l := range [][]verdict.Finding{ev.PrunedStateful, ev.ChangedStateful, ev.CRDChanges, ev.ImmutableRecreates, ev.Irreversible} {
			for i := range l {
				l[i].Approved = true
			}
		}
	}
	ev.Limits = append(ev.Limits, substituteFromLimits(fr)...)
	return ev, used, nil
}

// rollbackSucceeds checks that the known-good's pinned source still serves its recorded
// content and that it renders, and reports the wave's rehearsal when there was one.
func (c *Collector) rollbackSucceeds(ctx context.Context, sc *Scope, wv *v1alpha1.WaveStatus) verdict.RollbackSucceedsEvidence {
	fr, w := sc.Rollout, sc
	ev := verdict.RollbackSucceedsEvidence{Evidence: baseEvidence(fr, wv.Name, wv.Clusters, sc.Now)}
	kg := fr.Status.LastKnownGood
	if kg == nil {
		ev.FirstRollout = true
		return ev
	}
	src := &verdict.KnownGoodSource{
		Name: kg.Source, Exists: w.KnownGood.Exists, Ready: w.KnownGood.Ready,
		ServedDigest: w.KnownGood.Digest, RecordedDigest: kg.Digest,
	}
	goodFR := fr.Built(kg.Build)
	var unfinished *unfinishedRender
	if pkg, err := c.renderRevision(ctx, goodFR, w.KnownGood, kg.Digest, "the known-good "+kg.Revision, true); err != nil {
		src.RenderError = err.Error()
		answered := errors.Is(err, evidence.ErrNotServed) || errors.Is(err, evidence.ErrDigestMismatch)
		if errors.As(err, &unfinished) {
			ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Reason: err.Error()})
		} else if src.Exists && src.ServedDigest == src.RecordedDigest && !answered {
			// The source says it serves the recorded content and the fetch got no answer: not
			// observed. A source that answered it no longer serves it (its storage lost the file),
			// or serves other content, was observed: the way back is gone, and the gate decides so.
			ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Reason: "fetching the known-good's artifact failed: " + err.Error()})
		}
	} else if pkg.RenderErr != nil {
		src.RenderError = pkg.RenderErr.Error()
	} else if _, err := objectsOf(goodFR, nil, pkg); err != nil {
		src.RenderError = "postBuild substitution: " + err.Error()
	} else {
		src.Renders = true
	}
	ev.KnownGoodSource = src
	if rh := wv.Rehearsal; rh != nil {
		re := &verdict.RehearsalEvidence{Required: w.Settings.Rehearsal, Done: rh.Phase == v1alpha1.RehearsalDone}
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

func rehearsalLeg(started, ready *metav1.Time, now time.Time) *verdict.RehearsalLeg {
	if started == nil {
		return nil
	}
	if ready == nil {
		return &verdict.RehearsalLeg{OK: false, Seconds: now.Sub(started.Time).Seconds()}
	}
	return &verdict.RehearsalLeg{OK: true, Seconds: ready.Sub(started.Time).Seconds()}
}

// noDisruption summarises the wave's soak per cluster: the Kustomization's readiness and health
// checks at the candidate, and the workload availability sampled since the wave was Ready.
func (c *Collector) noDisruption(sc *Scope, wv *v1alpha1.WaveStatus) verdict.NoDisruptionEvidence {
	fr, w := sc.Rollout, sc
	spec := fr.WaveSpec(wv.Name)
	soak := WaveSoak(spec, w.Settings)
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
	var settled, asSeen []string
	summaries := make([]availability.ClusterSummary, 0, len(ev.Targets))
	for _, name := range ev.Targets {
		if reason, ok := held[name]; ok {
			ev.HeldBack = append(ev.HeldBack, verdict.HeldBack{Name: name, Reason: reason})
			continue
		}
		o := w.Kustomizations[name]
		ready, health, transient := o.JudgedAt(cand.Source, cand.Revision)
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
	ev.Limits = append(ev.Limits, availability.Limits(summaries...)...)
	if len(settled) > 0 {
		ev.Limits = append(ev.Limits, fmt.Sprintf("%d clusters were mid-reconcile when the evidence was collected (%s): their ready and healthChecks are those of their last finished reconcile of the candidate (status.history)",
			len(settled), firstOf(settled)))
	}
	if len(asSeen) > 0 {
		ev.Limits = append(ev.Limits, fmt.Sprintf("%d clusters were between two reconcile outcomes with none finished to go by (%s): they are judged as seen",
			len(asSeen), firstOf(asSeen)))
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
func (c *Collector) Forget(sc *Scope, i int) {
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
func (c *Collector) waveSampler(sc *Scope, i int) *availability.Sampler {
	return c.samples(c.waveInterval(sc, sc.Rollout.Status.Waves[i].Name))
}

// waveInterval is the sample interval of the soak of the wave named wave (waveSampler).
func (c *Collector) waveInterval(sc *Scope, wave string) time.Duration {
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

// preflight checks targets, in the order given, at most PreflightParallel at once, each within its
// share of the time ctx has left (preflight.CheckAll). A target's kubeconfig is read in its own
// turn, within its own deadline.
func (c *Collector) preflight(ctx context.Context, sc *Scope, targets []string, pkg *renderedPackage, objs []*unstructured.Unstructured, opts preflight.Options) []verdict.ClusterPreflight {
	fr := sc.Rollout
	pts := make([]preflight.Target, 0, len(targets))
	for _, name := range targets {
		t := preflight.Target{Name: name}
		if fc := sc.Clusters[name]; fc != nil {
			t.Resolve = func(ctx context.Context) (*rest.Config, error) { return c.Members.Config(ctx, fc) }
		} else {
			t.Err = fmt.Errorf("fleetcluster %s/%s is gone", fr.Namespace, name)
		}
		pts = append(pts, t)
	}
	// A target with values of its own is checked with the package substituted with them.
	substituteOwnValues(fr, sc.Clusters, pts, pkg)
	return preflight.CheckAll(ctx, pts, objs, opts, c.PreflightParallel)
}

func (c *Collector) now() time.Time {
	if c.Clock != nil {
		return c.Clock()
	}
	return time.Now()
}

// WaveSoak is the wave's soak: its spec's, else the policy's, else a minute.
func WaveSoak(spec v1alpha1.Wave, s verdict.Settings) time.Duration {
	if spec.Soak != nil {
		return spec.Soak.Duration
	}
	if s.Soak > 0 {
		return s.Soak
	}
	return time.Minute
}
