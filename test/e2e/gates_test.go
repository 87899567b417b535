package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/verdict"
	"github.com/tidegate/tidegate/verdict/bounded"
)

// twoWaveRollout is "web": a canary of one cluster, then the rest; health is the web Deployment's
// alone, not every object's.
func twoWaveRollout(ns string) *v1alpha1.FleetRollout {
	one := int32(1)
	soak := &metav1.Duration{Duration: testSoak}
	noWait := false
	return &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet"},
			Path:      "./app",
			Template: v1alpha1.KustomizationTemplate{
				Interval:        &metav1.Duration{Duration: time.Minute},
				Timeout:         &metav1.Duration{Duration: testHealthTimeout},
				TargetNamespace: ns,
				Wait:            &noWait,
				HealthChecks: []meta.NamespacedObjectKindReference{
					{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Namespace: ns},
				},
			},
			Waves: []v1alpha1.Wave{
				{Name: "canary", Count: &one, Soak: soak},
				{Name: "rest", Selector: &metav1.LabelSelector{}, Soak: soak},
			},
			Interval: &metav1.Duration{Duration: 5 * time.Second},
		},
	}
}

// withFiles returns the demo package at version with extra files (name → content, "" removes one)
// and the kustomization's resources extended by the extra YAML files under app/.
func withFiles(version string, extra map[string]string) map[string]string {
	files := demoPackage(version)
	resources := []string{"namespace.yaml", "deployment.yaml", "configmap.yaml"}
	names := make([]string, 0, len(extra))
	for n := range extra {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		files[n] = extra[n]
		if rel, ok := strings.CutPrefix(n, "app/"); ok && strings.HasSuffix(n, ".yaml") && !strings.Contains(rel, "/") {
			resources = append(resources, rel)
		}
	}
	files["app/kustomization.yaml"] = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + strings.Join(resources, ", ") + "]\n"
	return files
}

const pvcYAML = `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: demo
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
`

func statefulSetYAML(size string) string {
	return `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: demo
spec:
  serviceName: db
  replicas: 1
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: db
        image: ghcr.io/example/db:1
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
      resources:
        requests:
          storage: ` + size + "\n"
}

// commitFiles commits files as the next revision of the fleet repository and returns it.
func (s *fleetSetup) commitFiles(t *testing.T, msg string, files map[string]string, remove ...string) string {
	t.Helper()
	sha, err := s.repo.Commit(msg, files, remove)
	if err != nil {
		t.Fatal(err)
	}
	return s.repo.Revision(sha)
}

// createRollout creates fr (changed by mutate) and waits until rev runs everywhere.
func (s *fleetSetup) createRollout(ctx context.Context, t *testing.T, fr *v1alpha1.FleetRollout, rev string, mutate func(*v1alpha1.FleetRollout)) {
	t.Helper()
	if mutate != nil {
		mutate(fr)
	}
	if err := s.f.Hub.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}
	s.waitPhase(ctx, t, fr.Name, v1alpha1.PhaseCompleted, rev)
}

// policyRepo serves a policy from a Git repository "policies" through the GitRepository "policies".
func (s *fleetSetup) policyRepo(t *testing.T, files map[string]string) *localfleet.GitRepo {
	t.Helper()
	repo, _, err := s.f.NewRepo(s.ns+"-policies", files)
	if err != nil {
		t.Fatal(err)
	}
	s.gitSource(t, "policies", repo)
	return repo
}

// defaultPolicy is the built-in policy's text with replacements (old, new, old, new...) applied.
func defaultPolicy(t *testing.T, replace ...string) string {
	t.Helper()
	text := string(verdict.DefaultPolicyFiles()["default.cue"])
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(text, replace[i]) {
			t.Fatalf("the default policy has no %q to replace", replace[i])
		}
		text = strings.Replace(text, replace[i], replace[i+1], 1)
	}
	return text
}

// usePolicy points the rollout at the policy in the "policies" repository.
func usePolicy(fr *v1alpha1.FleetRollout) {
	fr.Spec.Policy = &v1alpha1.PolicyReference{SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "policies"}, Path: "./policy"}
}

// receiptsOf lists the receipts of the rollout's candidate rev, newest first.
func (s *fleetSetup) receiptsOf(ctx context.Context, t *testing.T, rollout, rev string) []v1alpha1.GateReceipt {
	t.Helper()
	var list v1alpha1.GateReceiptList
	if err := s.f.Hub.List(ctx, &list, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	var out []v1alpha1.GateReceipt
	for _, rc := range list.Items {
		if rc.Spec.Rollout == rollout && rc.Spec.Candidate.Revision == rev {
			out = append(out, rc)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[j].Spec.EvaluatedAt.Before(&out[i].Spec.EvaluatedAt) })
	return out
}

// latestReceipt is the newest receipt of gate for wave, or nil.
func latestReceipt(list []v1alpha1.GateReceipt, gate, wave string) *v1alpha1.GateReceipt {
	for i := range list {
		if list[i].Spec.Gate == gate && list[i].Spec.Wave == wave {
			return &list[i]
		}
	}
	return nil
}

// waitGate waits until the rollout's condition for gate has status, and returns the rollout.
func (s *fleetSetup) waitGate(ctx context.Context, t *testing.T, name, gate string, status metav1.ConditionStatus) *v1alpha1.FleetRollout {
	t.Helper()
	var fr *v1alpha1.FleetRollout
	eventually(ctx, t, fmt.Sprintf("rollout %s condition %s=%s", name, gate, status), func() (bool, string) {
		fr = s.rollout(t, name)
		c := findCondition(fr, gate)
		return c != nil && c.Status == status, describe(fr)
	})
	return fr
}

// nothingApplied checks, through the rollout's next two reconciles, that no Kustomization of the
// rollout points at rev and that no member runs version; only clusters' when any are named.
func (s *fleetSetup) nothingApplied(ctx context.Context, t *testing.T, rollout, rev, version string, clusters ...string) {
	t.Helper()
	if len(clusters) == 0 {
		for _, m := range s.members {
			clusters = append(clusters, m.Name)
		}
	}
	mark := reconciles(t, s.ns, rollout)
	for {
		for _, c := range clusters {
			if ks := s.kustomization(t, rollout, c); ks != nil && ks.Annotations[v1alpha1.RevisionAnnotation] == rev {
				t.Fatalf("cluster %s was switched to %s", c, rev)
			}
			if v := s.memberVersion(ctx, c); v == version {
				t.Fatalf("cluster %s runs %s", c, version)
			}
		}
		if reconciles(t, s.ns, rollout) >= mark+2 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the rollout %s was not reconciled twice while checking that %s is applied nowhere", rollout, rev)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// approve adds an approval to the rollout's spec.
func (s *fleetSetup) approve(ctx context.Context, t *testing.T, name string, a v1alpha1.Approval) {
	t.Helper()
	s.patchRollout(ctx, t, name, func(fr *v1alpha1.FleetRollout) { fr.Spec.Approvals = append(fr.Spec.Approvals, a) })
}

func evidenceOf(t *testing.T, rc *v1alpha1.GateReceipt, into any) {
	t.Helper()
	if rc.Spec.Evidence == nil {
		t.Fatalf("receipt %s keeps no evidence", rc.Name)
	}
	if err := json.Unmarshal(rc.Spec.Evidence.Raw, into); err != nil {
		t.Fatalf("receipt %s evidence: %v", rc.Name, err)
	}
}

func reasonsContain(rc *v1alpha1.GateReceipt, parts ...string) bool {
	for _, r := range rc.Spec.Reasons {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(r, p)
		}
		if all {
			return true
		}
	}
	return false
}

// A revision whose workload loses availability on the canary during the soak fails noDisruption,
// though its Kustomization stays Ready: the reasons name the cluster and the measure. With the
// built-in policy (onFail Hold) the rollout holds; a policy from Git saying onFail Rollback then
// rolls the canary back.
func TestE2ENoDisruptionFailsOnLostAvailability(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	policies := s.policyRepo(t, map[string]string{"policy/policy.cue": defaultPolicy(t)})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Waves[0].Soak = &metav1.Duration{Duration: 25 * time.Second}
	})

	canary := s.rollout(t, "web").Status.Waves[0].Clusters[0]
	rev2 := s.commitVersion(t, "v2")
	s.loseAvailabilityOnceSoaking(ctx, t, "web", rev2, "v2", canary, 0)
	held := s.waitPhase(ctx, t, "web", v1alpha1.PhaseHeld, rev2)
	if w := held.Status.Waves[0]; w.Phase != v1alpha1.WaveFailed {
		t.Fatalf("canary wave %+v, want Failed", w)
	}
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateNoDisruption, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultFail {
		t.Fatalf("no failed noDisruption receipt for the canary: %+v", rc)
	}
	if !reasonsContain(rc, "minAvailableRatio", canary) {
		t.Errorf("noDisruption reasons should name the canary %s and the measure: %q", canary, rc.Spec.Reasons)
	}
	var ev verdict.NoDisruptionEvidence
	evidenceOf(t, rc, &ev)
	if len(ev.Clusters) != 1 || !ev.Clusters[0].Ready || ev.Clusters[0].Samples < 2 || ev.Clusters[0].MinAvailableRatio == nil || *ev.Clusters[0].MinAvailableRatio >= 0.9 || ev.Clusters[0].UnavailableSeconds == nil || *ev.Clusters[0].UnavailableSeconds <= 0 {
		t.Errorf("evidence should show a Ready Kustomization whose workload lost availability: %+v", ev.Clusters)
	}
	if len(ev.Limits) == 0 {
		t.Errorf("noDisruption evidence should say what sampling cannot see")
	}
	for _, m := range s.members {
		want := "v1"
		if m.Name == canary {
			want = "v2"
		}
		if v := s.memberVersion(ctx, m.Name); v != want {
			t.Errorf("held: %s runs %q, want %s", m.Name, v, want)
		}
	}

	// The policy in Git rolls back on failure; the rollout's spec leaves onFailure to it.
	if _, err := policies.Commit("policy edit", map[string]string{"policy/policy.cue": defaultPolicy(t, `onFail:         "Hold"`, `onFail:         "Rollback"`)}, nil); err != nil {
		t.Fatal(err)
	}
	s.patchRollout(ctx, t, "web", usePolicy)
	back := s.waitPhase(ctx, t, "web", v1alpha1.PhaseRolledBack, rev2)
	if !back.IsRejected(rev2) {
		t.Errorf("a rolled-back revision is rejected: %+v", back.Status.Rejected)
	}
	eventually(ctx, t, "canary back at v1", func() (bool, string) {
		v := s.memberVersion(ctx, canary)
		return v == "v1", v
	})
	if back.Status.LastKnownGood.Revision != rev1 {
		t.Errorf("known-good %s, want %s", back.Status.LastKnownGood.Revision, rev1)
	}
}

// A revision that drops a PVC, then one that changes a StatefulSet's volumeClaimTemplates, fail
// rollbackSafe before the first wave: nothing is applied anywhere until an approval of that
// revision's irreversible changes is added; then it rolls out, and the receipt records the approval.
func TestE2ERollbackSafeNeedsApproval(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, withFiles("v1", map[string]string{"app/pvc.yaml": pvcYAML, "app/db.yaml": statefulSetYAML("1Gi")}))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s.createRollout(ctx, t, twoWaveRollout(s.ns), s.repo.Revision(first), func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Template.Force = true // a volumeClaimTemplates change applies only by recreating the StatefulSet
	})

	for _, step := range []struct {
		version, field string
		files          map[string]string
		remove         []string
	}{
		{version: "v2", field: "prunedStateful", files: withFiles("v2", map[string]string{"app/db.yaml": statefulSetYAML("1Gi")}), remove: []string{"app/pvc.yaml"}},
		{version: "v3", field: "changedStateful", files: withFiles("v3", map[string]string{"app/db.yaml": statefulSetYAML("2Gi")})},
	} {
		rev := s.commitFiles(t, step.version, step.files, step.remove...)
		fr := s.waitGate(ctx, t, "web", v1alpha1.GateRollbackSafe, metav1.ConditionFalse)
		if fr.Status.Candidate.Revision != rev {
			t.Fatalf("%s: rollbackSafe failed for %s, want %s", step.version, fr.Status.Candidate.Revision, rev)
		}
		if w := fr.Status.Waves[0]; w.Phase != v1alpha1.WavePending || w.StartedAt != nil {
			t.Fatalf("%s: the first wave must not start: %+v", step.version, w)
		}
		rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev), v1alpha1.GateRollbackSafe, "canary")
		if rc == nil || rc.Spec.Result != v1alpha1.ResultFail || !reasonsContain(rc, "rollbackSafe."+step.field, "needs an approval of the candidate") {
			t.Fatalf("%s: rollbackSafe receipt should fail on %s: %+v", step.version, step.field, rc)
		}
		s.nothingApplied(ctx, t, "web", rev, step.version)

		// An approval of another revision, or one not for irreversible changes, does not count.
		s.approve(ctx, t, "web", v1alpha1.Approval{Revision: rev, By: "someone"})
		s.nothingApplied(ctx, t, "web", rev, step.version)
		s.approve(ctx, t, "web", v1alpha1.Approval{Revision: rev, Irreversible: true, By: "dba", Reason: "data migrated"})
		done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev)
		rc = latestReceipt(s.receiptsOf(ctx, t, "web", rev), v1alpha1.GateRollbackSafe, "canary")
		if rc == nil || rc.Spec.Result != v1alpha1.ResultPass || len(rc.Spec.Approvals) != 1 || rc.Spec.Approvals[0].By != "dba" {
			t.Fatalf("%s: the passing rollbackSafe receipt should record the approval: %+v", step.version, rc)
		}
		for _, m := range s.members {
			if v := s.memberVersion(ctx, m.Name); v != step.version {
				t.Errorf("%s: %s runs %q", step.version, m.Name, v)
			}
		}
		if done.Status.LastKnownGood.Revision != rev {
			t.Errorf("%s: known-good %s", step.version, done.Status.LastKnownGood.Revision)
		}
	}
}

// A revision with a migration Job the package marks irreversible needs an approval; with it the
// rollout proceeds, and the receipt records the approval and the finding.
func TestE2EIrreversibleMigrationNeedsApproval(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	s.createRollout(ctx, t, twoWaveRollout(s.ns), s.repo.Revision(first), nil)

	job := `apiVersion: batch/v1
kind: Job
metadata:
  name: migrate-v2
  namespace: demo
  annotations:
    tidegate.dev/irreversible: "drops the legacy sessions table"
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: ghcr.io/example/migrate:2
`
	rev2 := s.commitFiles(t, "v2 with a migration", withFiles("v2", map[string]string{"app/migrate.yaml": job}))
	s.waitGate(ctx, t, "web", v1alpha1.GateRollbackSafe, metav1.ConditionFalse)
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateRollbackSafe, "canary")
	if rc == nil || !reasonsContain(rc, "rollbackSafe.irreversible", "drops the legacy sessions table") {
		t.Fatalf("rollbackSafe should fail naming the irreversible change: %+v", rc)
	}
	s.nothingApplied(ctx, t, "web", rev2, "v2")

	s.approve(ctx, t, "web", v1alpha1.Approval{Revision: rev2, Irreversible: true, By: "alice", Reason: "migration reviewed"})
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	rc = latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateRollbackSafe, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultPass || len(rc.Spec.Approvals) != 1 || rc.Spec.Approvals[0].By != "alice" {
		t.Fatalf("passing receipt should record alice's approval: %+v", rc)
	}
	var ev verdict.RollbackSafeEvidence
	evidenceOf(t, rc, &ev)
	if len(ev.Irreversible) != 1 || ev.Irreversible[0].Name != "migrate-v2" || !ev.Irreversible[0].Approved {
		t.Errorf("evidence should list the approved migration: %+v", ev.Irreversible)
	}
}

// The known-good's pinned source no longer serves its artifact (storage lost it): rollbackSucceeds
// fails closed before the first wave, and nothing of the candidate is applied.
func TestE2ERollbackSucceedsFailsWhenKnownGoodIsGone(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, nil)

	fr := s.rollout(t, "web")
	var pin sourcev1.GitRepository
	if err := s.f.Hub.Get(ctx, keyOf(s.ns, fr.Status.LastKnownGood.Source), &pin); err != nil {
		t.Fatal(err)
	}
	// Suspended first, so that source-controller does not fetch the artifact again: once it is back,
	// rollbackSucceeds is decided again and passes, as it should, and the candidate goes on (seen
	// under load, when the next decision came before the check that nothing was applied ended).
	suspended := pin.DeepCopy()
	suspended.Spec.Suspend = true
	if err := s.f.Hub.Patch(ctx, suspended, client.MergeFrom(&pin)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(s.f.Dir, "source-storage", pin.Status.Artifact.Path)); err != nil {
		t.Fatal(err)
	}
	rev2 := s.commitVersion(t, "v2")
	s.waitGate(ctx, t, "web", v1alpha1.GateRollbackSucceeds, metav1.ConditionFalse)
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateRollbackSucceeds, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultFail || !reasonsContain(rc, "rollbackSucceeds.knownGoodSource.renders") {
		t.Fatalf("rollbackSucceeds should fail on the known-good's artifact: %+v", rc)
	}
	var ev verdict.RollbackSucceedsEvidence
	evidenceOf(t, rc, &ev)
	if ev.KnownGoodSource == nil || ev.KnownGoodSource.Renders || !strings.Contains(ev.KnownGoodSource.RenderError, "not served") {
		t.Errorf("evidence should say the known-good is not served: %+v", ev.KnownGoodSource)
	}
	s.nothingApplied(ctx, t, "web", rev2, "v2")
}

// A policy that requires verified provenance, with a source that verifies nothing: deploySafe fails
// and nothing is applied.
func TestE2EDeploySafeRequiresProvenance(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	s.policyRepo(t, map[string]string{
		"policy/policy.cue": defaultPolicy(t),
		"policy/provenance.cue": `package policy

deploySafe: source: verified: true | error("the candidate's provenance must be verified: set spec.verify on the source")
`,
	})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 5*time.Minute)
	defer cancel()
	fr := twoWaveRollout(s.ns)
	usePolicy(fr)
	if err := s.f.Hub.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}
	rev1 := s.repo.Revision(first)
	got := s.waitGate(ctx, t, "web", v1alpha1.GateDeploySafe, metav1.ConditionFalse)
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev1), v1alpha1.GateDeploySafe, "canary")
	if rc == nil || !reasonsContain(rc, "deploySafe.source.verified", "provenance must be verified") {
		t.Fatalf("deploySafe should fail on provenance: %+v", rc)
	}
	if !strings.HasPrefix(rc.Spec.PolicyDigest, "sha256:") {
		t.Errorf("the receipt should record the Git policy's digest, got %q", rc.Spec.PolicyDigest)
	}
	if c := findCondition(got, v1alpha1.GateDeploySafe); c == nil || !strings.Contains(c.Message, rc.Name) {
		t.Errorf("the deploySafe condition should name the receipt: %+v", c)
	}
	s.nothingApplied(ctx, t, "web", rev1, "v1")
}

// Install-time values checked against the package's tidegate/install.cue: an unknown key, then a
// protected one, fail deploySafe naming the key; allowed values pass.
func TestE2EDeploySafeChecksInstallValues(t *testing.T) {
	parallel(t)
	schema := `package install

values: {
	replicas?: =~"^[0-9]+$"
}
protected: ["image"]
`
	s, first := newFleetSetup(t, 2, withFiles("v1", map[string]string{"app/tidegate/install.cue": schema}))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	fr := twoWaveRollout(s.ns)
	fr.Spec.Template.PostBuild = &kustomizev1.PostBuild{Substitute: map[string]string{"replicas": "2", "colour": "blue"}}
	if err := s.f.Hub.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}
	rev1 := s.repo.Revision(first)
	for _, tc := range []struct {
		key   string
		field string
		next  map[string]string
	}{
		{key: "colour", field: "unknownKeys", next: map[string]string{"replicas": "2", "image": "evil:latest"}},
		{key: "image", field: "protectedKeys", next: map[string]string{"replicas": "2"}},
	} {
		eventually(ctx, t, "deploySafe fails naming "+tc.key, func() (bool, string) {
			rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev1), v1alpha1.GateDeploySafe, "canary")
			if rc == nil {
				return false, "no receipt"
			}
			return rc.Spec.Result == v1alpha1.ResultFail && reasonsContain(rc, "deploySafe.install."+tc.field, tc.key), fmt.Sprint(rc.Spec.Reasons)
		})
		s.nothingApplied(ctx, t, "web", rev1, "v1")
		s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Template.PostBuild.Substitute = tc.next })
	}
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev1)
}

// A policy edit with a CUE syntax error stalls the rollout with the error and nothing advances;
// the commit that fixes it resumes the rollout.
func TestE2EBrokenPolicyStallsUntilFixed(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	policies := s.policyRepo(t, map[string]string{"policy/policy.cue": defaultPolicy(t)})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	s.createRollout(ctx, t, twoWaveRollout(s.ns), s.repo.Revision(first), usePolicy)

	if _, err := policies.Commit("policy edit", map[string]string{"policy/policy.cue": defaultPolicy(t, "settings: {", "settings: {{")}, nil); err != nil {
		t.Fatal(err)
	}
	// Wait until the policy source serves the broken commit before the package moves on.
	eventually(ctx, t, "rollout stalled on the policy", func() (bool, string) {
		fr := s.rollout(t, "web")
		c := findCondition(fr, "Stalled")
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.InvalidPolicyReason, describe(fr)
	})
	rev2 := s.commitVersion(t, "v2")
	s.nothingApplied(ctx, t, "web", rev2, "v2")
	fr := s.rollout(t, "web")
	c := findCondition(fr, "Stalled")
	if c == nil || !strings.Contains(c.Message, "policy.cue") || !strings.Contains(c.Message, "expected") {
		t.Errorf("Stalled should carry the CUE error with its position: %+v", c)
	}
	if r := findCondition(fr, "Ready"); r == nil || r.Status != metav1.ConditionFalse || r.Reason != v1alpha1.InvalidPolicyReason {
		t.Errorf("Ready should be False/InvalidPolicy: %+v", r)
	}
	// Each gate due on the canary has a receipt saying it could not be decided and why: one per
	// gate however many reconciles stalled on it, never recorded in status.
	undecided := func() map[string][]string {
		out := map[string][]string{}
		for _, rc := range s.receiptsOf(ctx, t, "web", rev2) {
			if rc.Annotations[controllers.UndecidedAnnotation] == "policy" && rc.Spec.Wave == "canary" && rc.Spec.Result == v1alpha1.ResultInconclusive &&
				reasonsContain(&rc, "not decided: the rollout's policy cannot decide", "policy.cue") {
				out[rc.Spec.Gate] = append(out[rc.Spec.Gate], rc.Name)
			}
		}
		return out
	}
	eventually(ctx, t, "a receipt of each undecided canary gate", func() (bool, string) {
		u := undecided()
		return len(u[v1alpha1.GateDeploySafe]) == 1 && len(u[v1alpha1.GateRollbackSafe]) == 1, fmt.Sprint(u)
	})
	// Two more reconciles, asked for as flux reconcile asks.
	for i := range 2 {
		s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) {
			if fr.Annotations == nil {
				fr.Annotations = map[string]string{}
			}
			fr.Annotations[meta.ReconcileRequestAnnotation] = fmt.Sprintf("undecided-%d", i)
		})
		eventually(ctx, t, "the reconcile asked for", func() (bool, string) {
			fr := s.rollout(t, "web")
			return fr.Status.LastHandledReconcileAt == fmt.Sprintf("undecided-%d", i), fr.Status.LastHandledReconcileAt
		})
	}
	for gate, names := range undecided() {
		if len(names) != 1 {
			t.Errorf("%s: %d undecided receipts after more reconciles, want the one: %v", gate, len(names), names)
		}
	}

	if _, err := policies.Commit("policy edit", map[string]string{"policy/policy.cue": defaultPolicy(t)}, nil); err != nil {
		t.Fatal(err)
	}
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	if c := findCondition(s.rollout(t, "web"), "Stalled"); c != nil {
		t.Errorf("Stalled should be gone after the fix: %+v", c)
	}
	for _, w := range done.Status.Waves {
		for _, g := range w.Gates {
			for _, names := range undecided() {
				if slices.Contains(names, g.Receipt) {
					t.Errorf("wave %s records the undecided receipt %s as its %s decision", w.Name, g.Receipt, g.Gate)
				}
			}
		}
	}
}

// With the policy's rehearsal on, after the first wave the canary is rolled back to the known-good
// and forward again; the rollbackSucceeds receipt has both legs' health and timings.
//
// The controller is stopped at the rehearsal's points, a fresh one started each time: before the
// rehearsal's start is recorded (noDisruption's receipt written), before the canary is switched back,
// before the forward leg is recorded, before the rehearsal's rollbackSucceeds receipt is written, and
// between writing it and recording it. The canary is rehearsed once (switched to v2, back and forward,
// three writes), and each decision has one receipt, listed once in the ledger.
func TestE2ERehearsal(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	s.policyRepo(t, map[string]string{"policy/policy.cue": defaultPolicy(t, "rehearsal:      false", "rehearsal:      true")})
	h := startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, usePolicy)
	if rh := s.rollout(t, "web").Status.Waves[0].Rehearsal; rh != nil {
		t.Fatalf("a first rollout has nothing to rehearse going back to: %+v", rh)
	}
	canary := s.rollout(t, "web").Status.Waves[0].Clusters[0]
	h.Stop(t)
	gen1 := s.generations(t, "web")[canary]
	rev2 := s.commitVersion(t, "v2")
	at := func(wavePhase, rehearsal string, switches int64, rollbackSucceeds int) func() {
		return func() {
			t.Helper()
			got := s.rollout(t, "web")
			wv := got.Status.Waves[0]
			rh := ""
			if wv.Rehearsal != nil {
				rh = wv.Rehearsal.Phase
			}
			if got.Status.Candidate.Revision != rev2 || wv.Phase != wavePhase || rh != rehearsal {
				t.Fatalf("at the crash the canary should be %s, its rehearsal %q: %s (rehearsal %+v)", wavePhase, rehearsal, describe(got), wv.Rehearsal)
			}
			if g := s.kustomization(t, "web", canary).Generation; g != gen1+switches {
				t.Fatalf("at the crash the canary's Kustomization was written %d times, want %d", g-gen1, switches)
			}
			if n := len(s.receiptsByDecision(ctx, t, rev2)[v1alpha1.GateRollbackSucceeds+"/canary"]); n != rollbackSucceeds {
				t.Fatalf("%d rollbackSucceeds receipts of the canary at the crash, want %d", n, rollbackSucceeds)
			}
		}
	}
	s.crashThrough(ctx, t,
		// noDisruption passed and its receipt is written; the rehearsal it starts is not recorded.
		crashPoint{point: "status:rehearsal:canary:" + v1alpha1.RehearsalRollingBack, atCrash: func() {
			at(v1alpha1.WaveSoaking, "", 1, 1)()
			if n := len(s.receiptsByDecision(ctx, t, rev2)[v1alpha1.GateNoDisruption+"/canary"]); n != 1 {
				t.Fatalf("%d noDisruption receipts of the canary at the crash, want the one written", n)
			}
		}},
		crashPoint{point: "switch:" + canary, atCrash: at(v1alpha1.WaveRehearsing, v1alpha1.RehearsalRollingBack, 1, 1)},
		// Back at the known-good; the forward leg is not recorded.
		crashPoint{point: "status:rehearsal:canary:" + v1alpha1.RehearsalRollingForward, atCrash: at(v1alpha1.WaveRehearsing, v1alpha1.RehearsalRollingBack, 2, 1)},
		crashPoint{point: "receipt:rollbackSucceeds:canary", atCrash: at(v1alpha1.WaveRehearsing, v1alpha1.RehearsalRollingForward, 3, 1)},
		// The rehearsal's decision is written, not recorded: status records the pre-wave one.
		crashPoint{point: "decided:rollbackSucceeds:canary", atCrash: func() {
			at(v1alpha1.WaveRehearsing, v1alpha1.RehearsalRollingForward, 3, 2)()
			pre := findGate(s.rollout(t, "web").Status.Waves[0].Gates, v1alpha1.GateRollbackSucceeds).Receipt
			if latest := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateRollbackSucceeds, "canary"); latest == nil || latest.Name == pre {
				t.Fatalf("at the crash status records the rehearsal's rollbackSucceeds (%s) already", pre)
			}
		}},
	)
	startTidegate(t, s, controllers.Options{})
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	s.checkDecisions(ctx, t, done, rev2, map[string][]string{
		"canary": append(slices.Clone(canaryGates), v1alpha1.GateRollbackSucceeds),
		"rest":   laterGates,
	})
	rh := done.Status.Waves[0].Rehearsal
	if rh == nil || rh.Phase != v1alpha1.RehearsalDone || rh.BackReadyAt == nil || rh.ForwardReadyAt == nil {
		t.Fatalf("canary rehearsal = %+v", rh)
	}
	if done.Status.Waves[1].Rehearsal != nil {
		t.Errorf("only the first wave is rehearsed")
	}
	rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateRollbackSucceeds, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultPass {
		t.Fatalf("rollbackSucceeds after the rehearsal: %+v", rc)
	}
	var ev verdict.RollbackSucceedsEvidence
	evidenceOf(t, rc, &ev)
	if r := ev.Rehearsal; r == nil || !r.Required || !r.Done || r.Rollback == nil || r.Forward == nil ||
		!r.Rollback.OK || !r.Forward.OK || r.Rollback.Seconds < 0 || r.Forward.Seconds < 0 {
		// A leg's seconds come from status times kept to the second: a leg Flux finishes within the
		// second it started takes 0 s.
		b, _ := json.Marshal(ev.Rehearsal)
		t.Fatalf("rehearsal evidence = %s", b)
	}
	// The canary's Kustomization really went back and forth, once: v1, then v2, v1, v2.
	if g := s.kustomization(t, "web", canary).Generation; g != gen1+3 {
		t.Errorf("the canary's Kustomization should have been switched v1 → v2 → v1 → v2, three writes (generation %d, was %d)", g, gen1)
	}
}

// A rollout's own policy that would take the controller's memory (a comprehension over fifty million
// elements, opened for that rollout only) is evaluated in a worker that ends at the policy budget:
// its first wave's deploySafe is Inconclusive, the reason naming the budget, and nothing of it is
// applied. Another rollout on the same hub, with the same policy, completes meanwhile.
func TestE2EAPolicyOverItsBudgetHoldsOnlyItsOwnRollout(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 2, demoPackage("v1"))
	s.policyRepo(t, map[string]string{
		"policy/policy.cue": defaultPolicy(t),
		"policy/explode.cue": fmt.Sprintf(`package policy

import "list"

deploySafe: { if deploySafe.rollout == %q { _huge: len([for i in list.Range(0, 50000000, 1) {i}]) } }
`, s.ns+"/explode"),
	})
	startTidegate(t, s, controllers.Options{PolicyBudget: bounded.Budget{Time: 30 * time.Second, Memory: 128 << 20}})
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)

	explode := twoWaveRollout(s.ns)
	explode.Name = "explode"
	usePolicy(explode)
	if err := s.f.Hub.Create(ctx, explode); err != nil {
		t.Fatal(err)
	}
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, usePolicy)

	fr := s.waitGate(ctx, t, "explode", v1alpha1.GateDeploySafe, metav1.ConditionUnknown)
	if fr.Status.WaitingFor == nil || fr.Status.WaitingFor.Reason != v1alpha1.WaitingForInconclusive {
		t.Errorf("the rollout whose policy passes its budget waits on an Inconclusive gate: %s", describe(fr))
	}
	rc := latestReceipt(s.receiptsOf(ctx, t, "explode", rev1), v1alpha1.GateDeploySafe, "canary")
	if rc == nil || rc.Spec.Result != v1alpha1.ResultInconclusive || !strings.Contains(strings.Join(rc.Spec.Reasons, "\n"), "128 MiB memory") {
		t.Errorf("its deploySafe receipt should be Inconclusive, naming the policy budget: %+v", rc)
	}
	for _, m := range s.members {
		if ks := s.kustomization(t, "explode", m.Name); ks != nil {
			t.Errorf("the rollout whose policy passes its budget wrote %s's Kustomization", m.Name)
		}
	}
}
