package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/internal/sopstest"
)

// sopsPlaintext is the password the SOPS scenario's package holds encrypted: the members get it,
// nothing tidegate writes does.
const sopsPlaintext = "e2e-db-password-61c3f0a7"

// sopsFiles is the demo package at version with a Secret db whose data is SOPS-encrypted for key.
// Left encrypted, its data ("ENC[...]") is not base64: a member's API server refuses it, so a
// preflight dry-run that passes dry-ran it decrypted.
func sopsFiles(t *testing.T, key sopstest.Key, version string) map[string]string {
	t.Helper()
	secret, err := key.SecretData("demo", "db", map[string]string{"password": sopsPlaintext})
	if err != nil {
		t.Fatal(err)
	}
	return withFiles(version, map[string]string{"app/secret.yaml": string(secret)})
}

// A package with a SOPS-encrypted Secret goes through its waves on real Flux: without the
// rollout's decryption Secret the first wave's deploySafe is Inconclusive, naming the Secret, and
// nothing is applied; with it, every gate passes (the preflight dry-ran the decrypted Secret, which
// only decrypted is valid), kustomize-controller decrypts with the same Secret and every member
// gets the plaintext, and a second revision's rollbackSafe and rollbackSucceeds render both
// revisions decrypted. No receipt, ledger, exported bundle, event, status or controller log line
// holds the plaintext or the key.
func TestE2ESOPSPackageRollsOutDecrypted(t *testing.T) {
	parallel(t)
	key, err := sopstest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	s, first := newFleetSetup(t, 3, sopsFiles(t, key, "v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	fr := twoWaveRollout(s.ns)
	fr.Spec.Template.Decryption = &v1alpha1.Decryption{SecretRef: meta.LocalObjectReference{Name: "sops-age"}}
	if err := s.f.Hub.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}

	want := "the decryption Secret " + s.ns + "/sops-age (spec.template.decryption.secretRef) does not exist: create it"
	eventually(ctx, t, "the canary's deploySafe Inconclusive for want of the decryption Secret", func() (bool, string) {
		fr = s.rollout(t, "web")
		if len(fr.Status.Waves) == 0 {
			return false, describe(fr)
		}
		o := waveGate(fr.Status.Waves[0], v1alpha1.GateDeploySafe)
		if o == nil || o.Result != v1alpha1.ResultInconclusive || o.Receipt == "" {
			return false, describe(fr)
		}
		var rc v1alpha1.GateReceipt
		if err := s.f.Hub.Get(ctx, keyOf(s.ns, o.Receipt), &rc); err != nil {
			return false, err.Error()
		}
		ev, err := ops.ReceiptEvidence(ctx, s.f.Hub, &rc)
		return err == nil && strings.Contains(string(ev), want), fmt.Sprintf("receipt %s: %s (%v)", rc.Name, ev, err)
	})
	for _, m := range s.members {
		if ks := s.kustomization(t, "web", m.Name); ks != nil {
			t.Errorf("%s has a Kustomization while deploySafe is Inconclusive", m.Name)
		}
	}

	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "sops-age"}, Data: map[string][]byte{"fleet.agekey": []byte(key.Identity + "\n")}}
	if err := s.f.Hub.Create(ctx, keys); err != nil {
		t.Fatal(err)
	}
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev1)
	s.membersHoldPlaintext(ctx, t)
	for _, m := range s.members {
		if ks := s.kustomization(t, "web", m.Name); ks == nil || ks.Spec.Decryption == nil || ks.Spec.Decryption.SecretRef == nil ||
			ks.Spec.Decryption.Provider != "sops" || ks.Spec.Decryption.SecretRef.Name != "sops-age" {
			t.Errorf("%s's Kustomization decrypts with %+v, want sops with sops-age", m.Name, ks.Spec.Decryption)
		}
	}

	rev2 := s.commitFiles(t, "v2", sopsFiles(t, key, "v2"))
	fr = s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	passed := map[string]bool{}
	for _, rc := range s.receiptsOf(ctx, t, "web", rev2) {
		if rc.Spec.Result == v1alpha1.ResultPass {
			passed[rc.Spec.Wave+"/"+rc.Spec.Gate] = true
		}
	}
	for _, g := range []string{"canary/" + v1alpha1.GateDeploySafe, "canary/" + v1alpha1.GateRollbackSafe, "canary/" + v1alpha1.GateRollbackSucceeds,
		"rest/" + v1alpha1.GateDeploySafe, "rest/" + v1alpha1.GateNoDisruption} {
		if !passed[g] {
			t.Errorf("no passing receipt for %s of %s: %v; %s", g, rev2, passed, describe(fr))
		}
	}
	s.membersHoldPlaintext(ctx, t)
	s.nothingHolds(ctx, t, "web", sopsPlaintext, base64.StdEncoding.EncodeToString([]byte(sopsPlaintext)), key.Identity)
}

// membersHoldPlaintext checks that every member has Secret db with the decrypted password.
func (s *fleetSetup) membersHoldPlaintext(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, m := range s.members {
		var secret corev1.Secret
		if err := m.Client.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: "db"}, &secret); err != nil {
			t.Errorf("%s: Secret db: %v", m.Name, err)
			continue
		}
		if got := string(secret.Data["password"]); got != sopsPlaintext {
			t.Errorf("%s: Secret db's password is %q, want it decrypted", m.Name, got)
		}
	}
}

// nothingHolds checks that none of what tidegate writes or exports for the rollout holds any of
// secrets: its receipts (with their evidence, wherever kept), its ledgers and the bundles of them,
// the rollout's status, the namespace's events, and the controller's log.
func (s *fleetSetup) nothingHolds(ctx context.Context, t *testing.T, rollout string, secrets ...string) {
	t.Helper()
	docs := map[string][]byte{}
	keep := func(what string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		docs[what] = b
	}
	var receipts v1alpha1.GateReceiptList
	if err := s.f.Hub.List(ctx, &receipts, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	for i := range receipts.Items {
		rc := &receipts.Items[i]
		keep("receipt "+rc.Name, rc)
		ev, err := ops.ReceiptEvidence(ctx, s.f.Hub, rc)
		if err != nil {
			t.Fatalf("the evidence of receipt %s: %v", rc.Name, err)
		}
		docs["the evidence of receipt "+rc.Name] = ev
	}
	var ledgers v1alpha1.RolloutLedgerList
	if err := s.f.Hub.List(ctx, &ledgers, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	for _, l := range ledgers.Items {
		keep("ledger "+l.Name, l)
		b, _, err := ops.ExportBundle(ctx, s.f.Hub, s.ns, rollout, l.Spec.Candidate.Revision)
		if err != nil {
			t.Fatalf("exporting the bundle of %s: %v", l.Spec.Candidate.Revision, err)
		}
		keep("the bundle of "+l.Spec.Candidate.Revision, b)
	}
	var events corev1.EventList
	if err := s.f.Hub.List(ctx, &events, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	keep("events", events)
	keep("rollout", s.rollout(t, rollout))
	log, err := os.ReadFile(filepath.Join(s.f.Dir, "logs", "tidegate-controller-"+s.ns+".log"))
	if err != nil {
		t.Fatal(err)
	}
	docs["the controller's log"] = log
	if len(receipts.Items) == 0 || len(ledgers.Items) == 0 || len(events.Items) == 0 || len(log) == 0 {
		t.Fatalf("%d receipts, %d ledgers, %d events, %d bytes of log: nothing to look into", len(receipts.Items), len(ledgers.Items), len(events.Items), len(log))
	}
	for what, doc := range docs {
		for _, secret := range secrets {
			if strings.Contains(string(doc), secret) {
				t.Errorf("%s holds a decrypted value or the key", what)
			}
		}
	}
}

// dependencyFiles are two packages: platform/ (a ConfigMap platform) and app/ (the demo workload
// and its version ConfigMap, without the Namespace: each member has the scenario's namespace).
func dependencyFiles(version string) map[string]string {
	files := demoPackage(version)
	delete(files, "app/namespace.yaml")
	files["app/kustomization.yaml"] = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [deployment.yaml, configmap.yaml]\n"
	files["platform/kustomization.yaml"] = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [configmap.yaml]\n"
	files["platform/configmap.yaml"] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: platform\n  namespace: demo\ndata:\n  version: %q\n", version)
	return files
}

// Two rollouts started together, web depending on platform: on each cluster web's Kustomization
// (which depends on platform's there) applies only once platform's is Ready. platform's canary
// soaks while web's single wave waits, holding on the clusters platform has not reached, saying so
// and naming the dependency; no member ever runs web without platform, and each ran platform first.
func TestE2EDependsOnOrdersRolloutsPerCluster(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 3, dependencyFiles("v1"))
	for _, m := range s.members {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}
		if err := m.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	rev := s.repo.Revision(first)

	one := int32(1)
	platform := twoWaveRollout(s.ns)
	platform.Name, platform.Spec.Path = "platform", "./platform"
	platform.Spec.Template.HealthChecks = nil
	platform.Spec.Waves = []v1alpha1.Wave{
		{Name: "canary", Count: &one, Soak: &metav1.Duration{Duration: 30 * time.Second}},
		{Name: "rest", Selector: &metav1.LabelSelector{}, Soak: &metav1.Duration{Duration: testSoak}},
	}
	web := twoWaveRollout(s.ns)
	web.Spec.Waves = []v1alpha1.Wave{{Name: "all", Selector: &metav1.LabelSelector{}, Soak: &metav1.Duration{Duration: testSoak}}}
	web.Spec.Template.DependsOn = []meta.LocalObjectReference{{Name: "platform"}}

	// A member that runs web without platform is a violation, whenever it is seen.
	var mu sync.Mutex
	var violations []string
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	watching.Go(func() {
		for watchCtx.Err() == nil {
			for _, m := range s.members {
				if s.memberConfigMap(watchCtx, m.Name, "web-version") != nil && s.configMapGone(watchCtx, m.Name, "platform") {
					mu.Lock()
					violations = append(violations, m.Name)
					mu.Unlock()
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	for _, fr := range []*v1alpha1.FleetRollout{platform, web} {
		if err := s.f.Hub.Create(ctx, fr); err != nil {
			t.Fatal(err)
		}
	}

	eventually(ctx, t, "web waits for platform on the clusters platform has not reached", func() (bool, string) {
		fr := s.rollout(t, "web")
		wf := fr.Status.WaitingFor
		return wf != nil && wf.Reason == v1alpha1.WaitingForMembers &&
			strings.Contains(wf.Message, "held by kustomize-controller until a rollout this one depends on (spec.template.dependsOn) is Ready there") &&
			strings.Contains(wf.Message, "dependency '"+s.ns+"/platform-"), describe(fr)
	})
	if fr := s.rollout(t, "platform"); fr.Status.Phase == v1alpha1.PhaseCompleted {
		t.Errorf("platform completed before web was seen waiting for it: %s", describe(fr))
	}
	s.waitPhase(ctx, t, "platform", v1alpha1.PhaseCompleted, rev)
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev)
	stopWatch()
	watching.Wait()
	if len(violations) > 0 {
		t.Errorf("members ran web without platform: %v", violations)
	}
	for _, m := range s.members {
		p, w := s.memberConfigMap(ctx, m.Name, "platform"), s.memberConfigMap(ctx, m.Name, "web-version")
		if p == nil || w == nil || w.CreationTimestamp.Before(&p.CreationTimestamp) {
			t.Errorf("%s: platform %v, web %v: want both, platform first", m.Name, p, w)
		}
		want := []kustomizev1.DependencyReference{{Name: v1alpha1.KustomizationName("platform", m.Name)}}
		if ks := s.kustomization(t, "web", m.Name); ks == nil || len(ks.Spec.DependsOn) != 1 || ks.Spec.DependsOn[0] != want[0] {
			t.Errorf("%s: web's Kustomization %v, want it depending on %+v", m.Name, ks, want)
		}
	}
	if rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev), v1alpha1.GateNoDisruption, "all"); rc == nil || rc.Spec.Result != v1alpha1.ResultPass {
		t.Errorf("web's noDisruption: %+v, want a Pass once platform was Ready everywhere", rc)
	}
}

// memberConfigMap is ConfigMap name in the scenario's namespace of member, nil when there is none.
func (s *fleetSetup) memberConfigMap(ctx context.Context, member, name string) *corev1.ConfigMap {
	var cm corev1.ConfigMap
	if err := s.f.Member(member).Client.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: name}, &cm); err != nil {
		return nil
	}
	return &cm
}

// configMapGone tells whether member answers that ConfigMap name is not in the scenario's namespace.
func (s *fleetSetup) configMapGone(ctx context.Context, member, name string) bool {
	var cm corev1.ConfigMap
	err := s.f.Member(member).Client.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: name}, &cm)
	return apierrors.IsNotFound(err)
}
