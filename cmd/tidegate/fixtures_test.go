package main

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// The objects the read commands are tested on, as the controller, kustomize-controller and
// source-controller would have left them, with fixed times (the clock of the command line is
// fixedNow, 10:10).
//
// Namespace fleet: five FleetClusters (ap-1 unreachable), four FleetRollouts:
//   - web: ring-1 soaking after canary passed, everyone pending; pinned sources of its candidate,
//     known-good and an older revision; a Kustomization per cluster with its inventory; events;
//   - api: a first rollout whose canary is blocked by deploySafe (Ready=False);
//   - cache: Completed (Ready=True);
//   - auth: held by spec.hold (Ready=False).
//
// Namespace staging: one cluster, one rollout (for -A). Namespace audit: receipts to verify.

// at is 2026-03-01T10:mm:ssZ.
func at(mm, ss int) metav1.Time {
	return metav1.NewTime(time.Date(2026, 3, 1, 10, mm, ss, 0, time.UTC))
}

func atp(mm, ss int) *metav1.Time {
	t := at(mm, ss)
	return &t
}

// commit and digest give realistic, stable revisions and digests.
func commit(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func revision(rollout, s string) *v1alpha1.RevisionStatus {
	r := "main@sha1:" + commit(s)
	return &v1alpha1.RevisionStatus{Revision: r, Digest: digest(s), Source: v1alpha1.PinnedSourceName(rollout, r)}
}

func cond(t string, s metav1.ConditionStatus, reason, msg string, when metav1.Time) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: when, ObservedGeneration: 1}
}

// Revisions of the fixtures.
var (
	webCandidate = revision("web", "web v2.4.0")
	webKnownGood = revision("web", "web v2.3.1")
	webOlder     = revision("web", "web v2.3.0")
	apiCandidate = revision("api", "api v1.0.0")
	cacheRev     = revision("cache", "cache v7.2.0")
	authCand     = revision("auth", "auth v3.1.0")
	authGood     = revision("auth", "auth v3.0.2")
)

// createWithStatus creates obj, then writes its status through the status subresource, as the
// controllers do.
func createWithStatus(ctx context.Context, obj client.Object) error {
	return createWithStatusIn(ctx, k8s, obj)
}

// createWithStatusIn is createWithStatus through client c.
func createWithStatusIn(ctx context.Context, c client.Client, obj client.Object) error {
	want := obj.DeepCopyObject().(client.Object)
	if err := c.Create(ctx, obj); err != nil {
		return fmt.Errorf("creating %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	want.SetResourceVersion(obj.GetResourceVersion())
	if err := c.Status().Update(ctx, want); err != nil {
		return fmt.Errorf("writing the status of %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// receipt builds a receipt as the controller does: evidence digest, content digest, name and annotation.
func receipt(ns string, spec v1alpha1.GateReceiptSpec, evidence map[string]any) *v1alpha1.GateReceipt {
	if evidence != nil {
		raw, err := json.Marshal(evidence)
		if err != nil {
			panic(err)
		}
		spec.Evidence = &apiextensionsv1.JSON{Raw: raw}
		if spec.EvidenceDigest, err = v1alpha1.EvidenceDigest(raw); err != nil {
			panic(err)
		}
	}
	d, err := spec.ContentDigest()
	if err != nil {
		panic(err)
	}
	return &v1alpha1.GateReceipt{
		ObjectMeta: metav1.ObjectMeta{
			Name:        v1alpha1.ReceiptName(spec.Rollout, spec.Gate, d),
			Namespace:   ns,
			Labels:      map[string]string{v1alpha1.RolloutLabel: spec.Rollout},
			Annotations: map[string]string{v1alpha1.ContentDigestAnnotation: d},
		},
		Spec: spec,
	}
}

// gateReceipt is a receipt of a gate decision of rollout over the wave's targets, with small evidence.
func gateReceipt(ns, rollout, gate, wave string, cand, kg *v1alpha1.RevisionStatus, targets []string, result string, reasons []string, when metav1.Time) *v1alpha1.GateReceipt {
	ev := map[string]any{
		"rollout":     ns + "/" + rollout,
		"wave":        wave,
		"candidate":   map[string]any{"revision": cand.Revision, "digest": cand.Digest},
		"targets":     targets,
		"collectedAt": when.UTC().Format(time.RFC3339),
	}
	spec := v1alpha1.GateReceiptSpec{
		Gate: gate, Rollout: rollout, Wave: wave, Candidate: *cand, Targets: targets,
		Class: v1alpha1.ClassUserWorkload, Owner: "team-" + rollout,
		PolicyDigest: "builtin:sha256:" + commit("policy") + commit("policy")[:24],
		Result:       result, Reasons: reasons, EvaluatedAt: when,
	}
	if kg != nil {
		spec.KnownGood = kg
		ev["knownGood"] = map[string]any{"revision": kg.Revision, "digest": kg.Digest}
	} else if gate == v1alpha1.GateRollbackSafe || gate == v1alpha1.GateRollbackSucceeds {
		ev["firstRollout"] = true
		spec.Limits = []string{"first rollout of the package: there is no known-good revision to go back to"}
	}
	return receipt(ns, spec, ev)
}

func outcome(rc *v1alpha1.GateReceipt, gen int64) v1alpha1.GateOutcome {
	return v1alpha1.GateOutcome{Gate: rc.Spec.Gate, Result: rc.Spec.Result, Receipt: rc.Name, DecidedAt: &rc.Spec.EvaluatedAt, ObservedGeneration: gen}
}

func cluster(ns, name, region, version string, ready bool, seen metav1.Time) *v1alpha1.FleetCluster {
	fc := &v1alpha1.FleetCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"env": "prod", "region": region}},
		Spec:       v1alpha1.FleetClusterSpec{KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: name + "-kubeconfig"}}},
		Status: v1alpha1.FleetClusterStatus{
			ObservedGeneration: 1,
			ServerVersion:      version,
			LastObservedTime:   &seen,
			Conditions: []metav1.Condition{
				cond(v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReachableReason, "API server "+version+" answered", at(0, 0)),
				cond(v1alpha1.ReachableCondition, metav1.ConditionTrue, v1alpha1.ReachableReason, "API server "+version+" answered", at(0, 0)),
			},
		},
	}
	if !ready {
		msg := fmt.Sprintf(`Get "https://%s.example.net:6443/version": dial tcp 10.0.3.1:6443: i/o timeout`, name)
		fc.Status.Conditions = []metav1.Condition{
			cond(v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.UnreachableReason, msg, at(1, 0)),
			cond(v1alpha1.ReachableCondition, metav1.ConditionFalse, v1alpha1.UnreachableReason, msg, at(1, 0)),
		}
	}
	return fc
}

func pinnedSource(ns, rollout string, r *v1alpha1.RevisionStatus, fetched metav1.Time) *sourcev1.GitRepository {
	sha := r.Revision[len("main@sha1:"):]
	return &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.Source, Namespace: ns,
			Labels:      map[string]string{v1alpha1.RolloutLabel: rollout},
			Annotations: map[string]string{v1alpha1.RevisionAnnotation: r.Revision},
		},
		Spec: sourcev1.GitRepositorySpec{
			URL:       "https://git.example.net/platform/fleet.git",
			Interval:  metav1.Duration{Duration: 10 * time.Minute},
			Reference: &sourcev1.GitRepositoryRef{Branch: "main", Commit: sha},
		},
		Status: sourcev1.GitRepositoryStatus{
			ObservedGeneration: 1,
			Conditions: []metav1.Condition{
				cond(meta.ReadyCondition, metav1.ConditionTrue, meta.SucceededReason, "stored artifact for revision '"+r.Revision+"'", fetched),
			},
			Artifact: &meta.Artifact{
				Path: "gitrepository/" + ns + "/" + r.Source + "/" + sha + ".tar.gz", URL: "http://source-controller.flux-system.svc/gitrepository/" + ns + "/" + r.Source + "/" + sha + ".tar.gz",
				Revision: r.Revision, Digest: r.Digest, LastUpdateTime: fetched,
			},
		},
	}
}

func kustomization(ns, rollout, clusterName, wave string, source *v1alpha1.RevisionStatus, ready bool, when metav1.Time, inventory ...string) *kustomizev1.Kustomization {
	ks := &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{
			Name: v1alpha1.KustomizationName(rollout, clusterName), Namespace: ns,
			Labels:      map[string]string{v1alpha1.RolloutLabel: rollout, v1alpha1.ClusterLabel: clusterName, v1alpha1.WaveLabel: wave},
			Annotations: map[string]string{v1alpha1.RevisionAnnotation: source.Revision},
		},
		Spec: kustomizev1.KustomizationSpec{
			Interval:   metav1.Duration{Duration: 10 * time.Minute},
			Path:       "./apps/" + rollout,
			Prune:      true,
			Wait:       true,
			SourceRef:  kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: source.Source},
			KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: clusterName + "-kubeconfig"}},
		},
		Status: kustomizev1.KustomizationStatus{
			ObservedGeneration:    1,
			LastAppliedRevision:   source.Revision,
			LastAttemptedRevision: source.Revision,
			Conditions: []metav1.Condition{
				cond(meta.ReadyCondition, metav1.ConditionTrue, meta.ReconciliationSucceededReason, "Applied revision: "+source.Revision, when),
			},
		},
	}
	if !ready {
		ks.Status.Conditions = []metav1.Condition{
			cond(meta.ReadyCondition, metav1.ConditionFalse, meta.HealthCheckFailedReason, "health check failed after 5m0s: timeout waiting for: [Deployment/web/web status: 'InProgress']", when),
		}
	}
	if len(inventory) > 0 {
		ks.Status.Inventory = &kustomizev1.ResourceInventory{}
		for i := 0; i < len(inventory); i += 2 {
			ks.Status.Inventory.Entries = append(ks.Status.Inventory.Entries, kustomizev1.ResourceRef{ID: inventory[i], Version: inventory[i+1]})
		}
	}
	return ks
}

// webInventory is what the web package applies on a cluster, as kustomize-controller records it.
var webInventory = []string{
	"_web__Namespace", "v1",
	"web_web-config__ConfigMap", "v1",
	"web_web__Service", "v1",
	"web_web_apps_Deployment", "v1",
	"web_web_policy_PodDisruptionBudget", "v1",
}

func coreEvent(ns, name string, obj corev1.ObjectReference, typ, reason, msg, component string, when metav1.Time) *corev1.Event {
	obj.Namespace = ns
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: ns},
		InvolvedObject: obj,
		Type:           typ, Reason: reason, Message: msg,
		Source:         corev1.EventSource{Component: component},
		FirstTimestamp: when, LastTimestamp: when, Count: 1,
	}
}

func createFixtures(ctx context.Context) error {
	for _, ns := range []string{"fleet", "staging", "audit", "empty"} {
		if err := namespace(ctx, ns); err != nil {
			return err
		}
	}
	var objs []client.Object
	add := func(o ...client.Object) { objs = append(objs, o...) }

	// Clusters.
	add(
		cluster("fleet", "eu-1", "eu", "v1.37.2", true, at(9, 30)),
		cluster("fleet", "eu-2", "eu", "v1.37.2", true, at(9, 41)),
		cluster("fleet", "us-1", "us", "v1.37.1", true, at(9, 5)),
		cluster("fleet", "us-2", "us", "v1.37.1", true, at(9, 58)),
		cluster("fleet", "ap-1", "ap", "v1.36.4", false, metav1.NewTime(time.Date(2026, 3, 1, 9, 12, 0, 0, time.UTC))),
		cluster("staging", "stg-1", "eu", "v1.37.2", true, at(9, 50)),
	)

	// web: canary passed, ring-1 soaking, everyone pending.
	canary, ring1 := []string{"eu-1"}, []string{"eu-2", "us-1"}
	webCanaryReceipts := []*v1alpha1.GateReceipt{
		gateReceipt("fleet", "web", v1alpha1.GateDeploySafe, "canary", webCandidate, webKnownGood, canary, v1alpha1.ResultPass, nil, at(0, 3)),
		gateReceipt("fleet", "web", v1alpha1.GateRollbackSafe, "canary", webCandidate, webKnownGood, canary, v1alpha1.ResultPass, nil, at(0, 3)),
		gateReceipt("fleet", "web", v1alpha1.GateRollbackSucceeds, "canary", webCandidate, webKnownGood, canary, v1alpha1.ResultPass, nil, at(0, 3)),
		gateReceipt("fleet", "web", v1alpha1.GateNoDisruption, "canary", webCandidate, webKnownGood, canary, v1alpha1.ResultPass, nil, at(5, 41)),
	}
	webRing1Receipts := []*v1alpha1.GateReceipt{
		gateReceipt("fleet", "web", v1alpha1.GateDeploySafe, "ring-1", webCandidate, webKnownGood, ring1, v1alpha1.ResultPass, nil, at(5, 42)),
		gateReceipt("fleet", "web", v1alpha1.GateRollbackSucceeds, "ring-1", webCandidate, webKnownGood, ring1, v1alpha1.ResultPass, nil, at(5, 42)),
	}
	var canaryGates, ring1Gates []v1alpha1.GateOutcome
	for _, rc := range webCanaryReceipts {
		add(rc)
		canaryGates = append(canaryGates, outcome(rc, 1))
	}
	for _, rc := range webRing1Receipts {
		add(rc)
		ring1Gates = append(ring1Gates, outcome(rc, 1))
	}
	add(&v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef:       v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet-repo"},
			Path:            "./apps/web",
			Owner:           "team-web",
			ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			Waves: []v1alpha1.Wave{
				{Name: "canary", Count: new(int32(1)), Soak: &metav1.Duration{Duration: 5 * time.Minute}},
				{Name: "ring-1", Percent: new(int32(50)), MaxFailures: new(int32(1)), Soak: &metav1.Duration{Duration: 10 * time.Minute}},
				{Name: "everyone", Selector: &metav1.LabelSelector{}, RequireApproval: true},
			},
		},
		Status: v1alpha1.FleetRolloutStatus{
			ObservedGeneration: 1,
			Phase:              v1alpha1.PhaseProgressing,
			CurrentWave:        "ring-1",
			Candidate:          webCandidate,
			LastKnownGood:      webKnownGood,
			WaitingFor: &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForSoak, Wave: "ring-1", Message: "wave ring-1 soaking for 10m0s",
				Since: atp(6, 30), Until: atp(16, 30)},
			Conditions: []metav1.Condition{
				cond(v1alpha1.ReadyCondition, metav1.ConditionUnknown, v1alpha1.ProgressingReason, "wave ring-1 soaking for 10m0s", at(0, 3)),
				cond(v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.ProgressingReason, "wave ring-1 soaking for 10m0s", at(0, 3)),
				cond(v1alpha1.GateDeploySafe, metav1.ConditionTrue, v1alpha1.GatePassedReason, "wave ring-1: Pass (receipt "+webRing1Receipts[0].Name+")", at(5, 42)),
				cond(v1alpha1.GateNoDisruption, metav1.ConditionTrue, v1alpha1.GatePassedReason, "wave canary: Pass (receipt "+webCanaryReceipts[3].Name+")", at(5, 41)),
			},
			Skipped:      []v1alpha1.SkippedCluster{{Name: "ap-1", Reason: "cluster is unreachable (Reachable=False)"}},
			SkippedCount: 1,
			Waves: []v1alpha1.WaveStatus{
				{Name: "canary", Phase: v1alpha1.WaveSucceeded, Clusters: canary, Updated: 1, Healthy: 1,
					StartedAt: atp(0, 3), ReadyAt: atp(0, 41), FinishedAt: atp(5, 41), Gates: canaryGates},
				{Name: "ring-1", Phase: v1alpha1.WaveSoaking, Clusters: ring1, Updated: 2, Healthy: 2,
					StartedAt: atp(5, 42), ReadyAt: atp(6, 30), Gates: ring1Gates},
				{Name: "everyone", Phase: v1alpha1.WavePending},
			},
		},
	})
	for _, r := range []*v1alpha1.RevisionStatus{webCandidate, webKnownGood, webOlder} {
		add(pinnedSource("fleet", "web", r, at(0, 0)))
	}
	add(
		kustomization("fleet", "web", "eu-1", "canary", webCandidate, true, at(0, 41), webInventory...),
		kustomization("fleet", "web", "eu-2", "ring-1", webCandidate, true, at(6, 30), webInventory...),
		kustomization("fleet", "web", "us-1", "ring-1", webCandidate, true, at(6, 28), webInventory...),
		kustomization("fleet", "web", "us-2", "everyone", webKnownGood, true, at(0, 0), webInventory...),
	)
	// A Kustomization of someone else's, in the same namespace: neither in the tree nor in the events.
	other := kustomization("fleet", "web", "eu-1", "canary", webCandidate, true, at(0, 0))
	other.Name, other.Labels = "flux-system", nil
	add(other)

	// api: a first rollout, its canary blocked by deploySafe.
	apiReceipts := []*v1alpha1.GateReceipt{
		gateReceipt("fleet", "api", v1alpha1.GateDeploySafe, "canary", apiCandidate, nil, canary, v1alpha1.ResultFail, []string{
			"deploySafe.targets.0.rejected: 1 object refused by a server-side dry-run: Deployment api/api: spec.template.spec.containers[0].image: Required value (targets.0: eu-1)",
		}, at(8, 15)),
		gateReceipt("fleet", "api", v1alpha1.GateRollbackSafe, "canary", apiCandidate, nil, canary, v1alpha1.ResultPass, nil, at(8, 15)),
		gateReceipt("fleet", "api", v1alpha1.GateRollbackSucceeds, "canary", apiCandidate, nil, canary, v1alpha1.ResultPass, nil, at(8, 15)),
	}
	var apiGates []v1alpha1.GateOutcome
	for _, rc := range apiReceipts {
		add(rc)
		apiGates = append(apiGates, outcome(rc, 2))
	}
	add(&v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "fleet"},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet-repo"},
			Path:      "./apps/api",
			Waves: []v1alpha1.Wave{
				{Name: "canary", Count: new(int32(1))},
				{Name: "rest", Selector: &metav1.LabelSelector{}},
			},
		},
		Status: v1alpha1.FleetRolloutStatus{
			Phase:       v1alpha1.PhaseProgressing,
			CurrentWave: "canary",
			Candidate:   apiCandidate,
			WaitingFor: &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForGateBlocked, Wave: "canary", Since: atp(8, 15), Until: atp(10, 15),
				Message: "wave canary is blocked before it starts by deploySafe (receipt " + apiReceipts[0].Name + "); nothing of it is applied; decided again at 2026-03-01T10:10:15Z or when the spec changes"},
			Conditions: []metav1.Condition{
				cond(v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.GateFailedReason, "wave canary is blocked before it starts by deploySafe (receipt "+apiReceipts[0].Name+"); nothing of it is applied; decided again at 2026-03-01T10:10:15Z or when the spec changes", at(8, 15)),
				cond(v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.ProgressingReason, "wave canary is blocked", at(8, 15)),
				cond(v1alpha1.GateDeploySafe, metav1.ConditionFalse, v1alpha1.GateFailedReason, "wave canary: "+apiReceipts[0].Spec.Reasons[0]+" (receipt "+apiReceipts[0].Name+")", at(8, 15)),
			},
			Waves: []v1alpha1.WaveStatus{
				{Name: "canary", Phase: v1alpha1.WavePending, Clusters: canary, Gates: apiGates},
				{Name: "rest", Phase: v1alpha1.WavePending},
			},
		},
	})

	// cache: completed.
	cacheTargets := []string{"eu-1", "eu-2", "us-1", "us-2"}
	cacheReceipts := []*v1alpha1.GateReceipt{
		gateReceipt("fleet", "cache", v1alpha1.GateDeploySafe, "all", cacheRev, nil, cacheTargets, v1alpha1.ResultPass, nil, at(1, 0)),
		gateReceipt("fleet", "cache", v1alpha1.GateRollbackSafe, "all", cacheRev, nil, cacheTargets, v1alpha1.ResultPass, nil, at(1, 0)),
		gateReceipt("fleet", "cache", v1alpha1.GateRollbackSucceeds, "all", cacheRev, nil, cacheTargets, v1alpha1.ResultPass, nil, at(1, 0)),
		gateReceipt("fleet", "cache", v1alpha1.GateNoDisruption, "all", cacheRev, nil, cacheTargets, v1alpha1.ResultPass, nil, at(3, 20)),
	}
	var cacheGates []v1alpha1.GateOutcome
	for _, rc := range cacheReceipts {
		add(rc)
		cacheGates = append(cacheGates, outcome(rc, 1))
	}
	add(&v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "fleet"},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet-repo"},
			Path:      "./apps/cache",
			Class:     v1alpha1.ClassSystemService,
			// all takes every cluster, so late, for clusters that join later, is skipped.
			Waves: []v1alpha1.Wave{{Name: "all", Percent: new(int32(100))}, {Name: "late", Selector: &metav1.LabelSelector{}}},
		},
		Status: v1alpha1.FleetRolloutStatus{
			ObservedGeneration: 1,
			Phase:              v1alpha1.PhaseCompleted,
			Candidate:          cacheRev,
			LastKnownGood:      cacheRev,
			History: []v1alpha1.HistoryEntry{
				{RevisionStatus: *cacheRev, CompletedAt: atp(3, 20)},
				{RevisionStatus: *revision("cache", "cache v7.1.4"), CompletedAt: atp(0, 0)},
			},
			Conditions: []metav1.Condition{
				cond(v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.SucceededReason, "revision "+cacheRev.Revision+" runs on 4 clusters", at(3, 20)),
				cond(v1alpha1.GateNoDisruption, metav1.ConditionTrue, v1alpha1.GatePassedReason, "wave all: Pass (receipt "+cacheReceipts[3].Name+")", at(3, 20)),
			},
			Waves: []v1alpha1.WaveStatus{
				{Name: "all", Phase: v1alpha1.WaveSucceeded, Clusters: cacheTargets, Updated: 4, Healthy: 4,
					StartedAt: atp(1, 0), ReadyAt: atp(2, 20), FinishedAt: atp(3, 20), Gates: cacheGates},
				{Name: "late", Phase: v1alpha1.WaveSkipped, Message: "no cluster left for this wave: the earlier waves took every eligible cluster"},
			},
		},
	})

	// auth: held by spec.hold after its canary.
	add(&v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "auth", Namespace: "fleet"},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet-repo"},
			Path:      "./apps/auth",
			Hold:      &v1alpha1.Hold{Reason: "change freeze until 2026-03-02"},
			Waves: []v1alpha1.Wave{
				{Name: "canary", Count: new(int32(1))},
				{Name: "everyone", Selector: &metav1.LabelSelector{}},
			},
		},
		Status: v1alpha1.FleetRolloutStatus{
			ObservedGeneration: 2,
			Phase:              v1alpha1.PhaseHeld,
			CurrentWave:        "everyone",
			Candidate:          authCand,
			LastKnownGood:      authGood,
			WaitingFor:         &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForHold, Wave: "everyone", Message: "held: change freeze until 2026-03-02", Since: atp(2, 0)},
			Conditions: []metav1.Condition{
				cond(v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.HeldReason, "held: change freeze until 2026-03-02", at(2, 0)),
				cond(v1alpha1.HeldCondition, metav1.ConditionTrue, v1alpha1.HeldReason, "spec.hold: change freeze until 2026-03-02", at(2, 0)),
			},
			Waves: []v1alpha1.WaveStatus{
				{Name: "canary", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"eu-1"}, Updated: 1, Healthy: 1,
					StartedAt: atp(0, 10), ReadyAt: atp(0, 50), FinishedAt: atp(1, 50)},
				{Name: "everyone", Phase: v1alpha1.WavePending},
			},
		},
	})

	// staging: one completed rollout.
	stgRev := revision("web", "web v2.4.0")
	add(&v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "staging"},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet-repo"},
			Path:      "./apps/web",
		},
		Status: v1alpha1.FleetRolloutStatus{
			ObservedGeneration: 1,
			Phase:              v1alpha1.PhaseCompleted,
			Candidate:          stgRev,
			LastKnownGood:      stgRev,
			Conditions: []metav1.Condition{
				cond(v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.SucceededReason, "revision "+stgRev.Revision+" runs on 1 cluster", at(0, 0)),
			},
			Waves: []v1alpha1.WaveStatus{{Name: "all", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"stg-1"}, Updated: 1, Healthy: 1}},
		},
	})

	// Events of web, its Kustomizations and pinned sources, and of others.
	fro := corev1.ObjectReference{Kind: v1alpha1.FleetRolloutKind, APIVersion: v1alpha1.GroupVersion.String(), Name: "web"}
	ksRef := func(c string) corev1.ObjectReference {
		return corev1.ObjectReference{Kind: kustomizev1.KustomizationKind, APIVersion: kustomizev1.GroupVersion.String(), Name: v1alpha1.KustomizationName("web", c)}
	}
	add(
		coreEvent("fleet", "web.1", corev1.ObjectReference{Kind: sourcev1.GitRepositoryKind, APIVersion: sourcev1.GroupVersion.String(), Name: webCandidate.Source},
			corev1.EventTypeNormal, "NewArtifact", "stored artifact for commit 'web: v2.4.0'", "source-controller", metav1.NewTime(time.Date(2026, 3, 1, 9, 59, 58, 0, time.UTC))),
		coreEvent("fleet", "web.2", fro, corev1.EventTypeNormal, "GatePassed", "deploySafe Pass for wave canary of "+webCandidate.Revision, "tidegate-controller", at(0, 3)),
		coreEvent("fleet", "web.3", fro, corev1.EventTypeNormal, "Switched", "Kustomization fleet/web-eu-1 now points at "+webCandidate.Source, "tidegate-controller", at(0, 4)),
		coreEvent("fleet", "web.4", ksRef("eu-1"), corev1.EventTypeNormal, "ReconciliationSucceeded", "Reconciliation finished in 36.2s, next run in 10m0s", "kustomize-controller", at(0, 41)),
		coreEvent("fleet", "web.5", fro, corev1.EventTypeNormal, "GatePassed", "noDisruption Pass for wave canary of "+webCandidate.Revision, "tidegate-controller", at(5, 41)),
		coreEvent("fleet", "web.6", fro, corev1.EventTypeNormal, "Switched", "Kustomization fleet/web-eu-2 now points at "+webCandidate.Source, "tidegate-controller", at(5, 43)),
		coreEvent("fleet", "web.7", fro, corev1.EventTypeNormal, "Switched", "Kustomization fleet/web-us-1 now points at "+webCandidate.Source, "tidegate-controller", at(5, 43)),
		coreEvent("fleet", "api.1", corev1.ObjectReference{Kind: v1alpha1.FleetRolloutKind, Name: "api"},
			corev1.EventTypeWarning, "GateFailed", "deploySafe Fail for wave canary", "tidegate-controller", at(8, 15)),
		coreEvent("fleet", "flux-system.1", corev1.ObjectReference{Kind: kustomizev1.KustomizationKind, Name: "flux-system"},
			corev1.EventTypeNormal, "ReconciliationSucceeded", "Reconciliation finished in 2s", "kustomize-controller", at(5, 0)),
	)
	// An events.k8s.io/v1 event: the same API object, with eventTime and no lastTimestamp.
	add(&eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: "web.8", Namespace: "fleet"},
		EventTime:           metav1.NewMicroTime(time.Date(2026, 3, 1, 10, 6, 12, 0, time.UTC)),
		ReportingController: "kustomize-controller", ReportingInstance: "kustomize-controller-7c9d",
		Action: "Reconcile", Reason: "Progressing", Type: corev1.EventTypeNormal,
		Note:      "Deployment/web/web configured\nService/web/web unchanged",
		Regarding: corev1.ObjectReference{Kind: kustomizev1.KustomizationKind, APIVersion: kustomizev1.GroupVersion.String(), Name: v1alpha1.KustomizationName("web", "us-1"), Namespace: "fleet"},
	})

	// audit: receipts to verify.
	good := gateReceipt("audit", "shop", v1alpha1.GateNoDisruption, "canary", revision("shop", "shop v9"), revision("shop", "shop v8"), []string{"eu-1"}, v1alpha1.ResultFail,
		[]string{"noDisruption.clusters.0.minAvailableRatio: invalid value 0.5 (out of bound >=0.9) (clusters.0: eu-1)"}, at(4, 0))
	// Tampered: named and annotated after a failed decision, then recorded as a pass.
	tampered := gateReceipt("audit", "shop", v1alpha1.GateDeploySafe, "canary", revision("shop", "shop v9"), revision("shop", "shop v8"), []string{"eu-1"}, v1alpha1.ResultFail,
		[]string{"deploySafe.targets.0.reachable: conflicting values true and false (targets.0: eu-1)"}, at(3, 0))
	tampered.Spec.Result, tampered.Spec.Reasons = v1alpha1.ResultPass, nil
	// Evidence edited after its digest was recorded; name and annotation recomputed to match.
	edited := gateReceipt("audit", "shop", v1alpha1.GateRollbackSucceeds, "canary", revision("shop", "shop v9"), revision("shop", "shop v8"), []string{"eu-1"}, v1alpha1.ResultPass, nil, at(3, 0))
	edited.Spec.Evidence = &apiextensionsv1.JSON{Raw: []byte(`{"rollout":"audit/shop","wave":"canary","targets":["eu-1","eu-2"]}`)}
	edited = receipt("audit", edited.Spec, nil)
	// Kept by the digest of its evidence only, as older versions kept evidence over 64 KiB.
	digestOnly := gateReceipt("audit", "shop", v1alpha1.GateRollbackSafe, "canary", revision("shop", "shop v9"), revision("shop", "shop v8"), []string{"eu-1"}, v1alpha1.ResultPass, nil, at(3, 0))
	digestOnly.Spec.Evidence = nil
	digestOnly = receipt("audit", digestOnly.Spec, nil)
	// The evidence of a wave of 1,000 clusters, kept compressed.
	wide, targets := wideNoDisruption(1000)
	raw, err := json.Marshal(wide)
	if err != nil {
		return err
	}
	compressed, _, err := v1alpha1.NewGateReceipt("audit", v1alpha1.GateReceiptSpec{
		Gate: v1alpha1.GateNoDisruption, Rollout: "shop", Wave: "rest", Candidate: *revision("shop", "shop v9"), KnownGood: revision("shop", "shop v8"),
		Targets: targets, Class: v1alpha1.ClassUserWorkload, PolicyDigest: "builtin:" + digest("policy"), Result: v1alpha1.ResultPass, EvaluatedAt: at(9, 1),
	}, raw)
	if err != nil {
		return err
	}
	add(good, tampered, edited, digestOnly, compressed)
	audit.good, audit.tampered, audit.edited, audit.digestOnly, audit.compressed = good.Name, tampered.Name, edited.Name, digestOnly.Name, compressed.Name

	for _, o := range objs {
		var err error
		switch o.(type) {
		case *v1alpha1.FleetCluster, *v1alpha1.FleetRollout, *sourcev1.GitRepository, *kustomizev1.Kustomization:
			err = createWithStatus(ctx, o)
		default:
			if err = k8s.Create(ctx, o); err != nil {
				err = fmt.Errorf("creating %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// audit holds the names of the receipts of namespace audit.
var audit struct{ good, tampered, edited, digestOnly, compressed string }
