package collector

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/sopstest"
	"github.com/tidegate/tidegate/verdict"
)

// servedPackage serves, at the returned URL, whichever artifact set last gave it, and sets the
// candidate's digest to its digest.
type servedPackage struct {
	mu  sync.Mutex
	art []byte
}

func (s *servedPackage) serve(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, _ = rw.Write(s.art)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/web.tar.gz"
}

func (s *servedPackage) set(t *testing.T, sc *engine.World, files map[string]string) {
	t.Helper()
	art, digest := tarball(t, files, "NS") // the encrypted files must stay byte for byte
	s.mu.Lock()
	s.art = art
	s.mu.Unlock()
	sc.Rollout.Status.Candidate.Digest, sc.Candidate.Digest = digest, digest
}

// deploySafe's render decrypts the package with the Secret of the rollout's
// spec.template.decryption, read from the rollout's namespace: without that Secret the evidence
// is unobserved (the gate Inconclusive), naming the Secret and the fix; with it, the render holds
// the decrypted Secret and the members' dry-runs take it, while the evidence holds no decrypted
// value, not even where a member's dry-run rejection quotes one.
func TestDeploySafeDecryptsWithTheRolloutsSecret(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	w := newWorld(t, 2, time.Second, time.Minute, 2*time.Minute, now)
	c := newCollector(t, nil)
	c.Secrets = k8s
	ctx := context.Background()
	key, err := sopstest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	const password, label = "collector-password-4b7e", "a label value with spaces 9d2f"
	secret, err := key.Secret(w.ns, "db", map[string]string{"password": password})
	if err != nil {
		t.Fatal(err)
	}
	sc := w.decision(t, now)
	sc.Rollout.Spec.Template.Decryption = &v1alpha1.Decryption{SecretRef: meta.LocalObjectReference{Name: "sops-age"}}
	var pkg servedPackage
	sc.Candidate.URL = pkg.serve(t)
	pkg.set(t, sc, map[string]string{"app/kustomization.yaml": "resources: [secret.yaml]\n", "app/secret.yaml": string(secret)})
	collect := func() (verdict.DeploySafeEvidence, string) {
		t.Helper()
		out, err := c.Collect(ctx, sc, v1alpha1.GateDeploySafe, 1)
		if err != nil {
			t.Fatal(err)
		}
		ev := out.Evidence.(verdict.DeploySafeEvidence)
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{password, label, key.Identity} {
			if strings.Contains(string(b), s) {
				t.Errorf("the evidence holds a secret: %s", b)
			}
		}
		return ev, string(b)
	}

	ev, doc := collect()
	if ev.Render.OK || len(ev.Unobserved) == 0 || !strings.Contains(doc, "the decryption Secret "+w.ns+"/sops-age (spec.template.decryption.secretRef) does not exist: create it") {
		t.Errorf("without the decryption Secret: %s; want unobserved, naming the Secret and the fix", doc)
	}

	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "sops-age"}, Data: map[string][]byte{"fleet.agekey": []byte(key.Identity)}}
	if err := k8s.Create(ctx, keys); err != nil {
		t.Fatal(err)
	}
	ev, doc = collect()
	if !ev.Render.OK || len(ev.Unobserved) != 0 || len(ev.Preflight.Failed) != 0 {
		t.Errorf("with the decryption Secret: %s; want rendered and preflighted", doc)
	}
	p, err := c.renderRevision(ctx, sc.Rollout, sc.Candidate, sc.Candidate.Digest, "the candidate", false)
	if err != nil || p.RenderErr != nil {
		t.Fatalf("the render: %v, %v", err, p.RenderErr)
	}
	if v, _, _ := unstructured.NestedString(p.Build.Objects[0].Object, "stringData", "password"); v != password {
		t.Errorf("the render's Secret has password %q, want it decrypted", v)
	}

	// A member that rejects a decrypted value quotes it: the evidence has it masked.
	labelled, err := key.Encrypt([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tagged\n  namespace: "+w.ns+"\n  labels:\n    note: \""+label+"\"\n"), "yaml", "^labels$")
	if err != nil {
		t.Fatal(err)
	}
	pkg.set(t, sc, map[string]string{"app/kustomization.yaml": "resources: [secret.yaml, tagged.yaml]\n", "app/secret.yaml": string(secret), "app/tagged.yaml": string(labelled)})
	ev, doc = collect()
	if !ev.Render.OK || len(ev.Preflight.Failed) == 0 || !strings.Contains(doc, "[redacted]") {
		t.Errorf("a decrypted label the members refuse: %s; want a failed preflight with the value masked", doc)
	}
}
