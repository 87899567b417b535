package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/test/testenv"
)

const leaseName = "tidegate-controller-leader"

// TestDeployManifestsControllerRunsUnderItsServiceAccount runs the manager binary as the Deployment
// runs it (its args and env; health and metrics ports moved to free local ones) with a token of the
// ServiceAccount the manifests create, on a hub with OwnerReferencesPermissionEnforcement, two
// replicas as in an HA install. It takes a rollout as far as it goes without Flux running: the
// leader probes a FleetCluster through its kubeconfig Secret, pins the candidate, decides the
// pre-wave gates (receipts), and server-side applies the member's Kustomization, with events and
// metrics. Nothing may be forbidden on the way: the RBAC covers what the code does, not only what the
// audit table says. The standby is ready but does not act; when the leader stops (SIGTERM) it
// releases the Lease and the standby takes over.
func TestDeployManifestsControllerRunsUnderItsServiceAccount(t *testing.T) {
	objs := mustBeInstalled(t)
	ctx := hub(t, 5*time.Minute)

	var dep appsv1.Deployment
	fromUnstructured(t, find(t, objs, "Deployment", deploymentName), &dep)

	// The ServiceAccount's own token, as its pods get one: its user and groups are the real ones.
	expiry := int64(3600)
	tr, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token of ServiceAccount %s/%s: %v", namespace, serviceAccount, err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeKubeconfig(t, kubeconfig, adminConfig.Host, adminConfig.CAData, clientcmdapi.AuthInfo{Token: tr.Status.Token})

	// The fleet namespace config/default creates, where the controller reads member credentials
	// (--fleet-namespaces=fleet), with one member cluster (the hub itself, reached through an admin
	// kubeconfig in a Secret, as any member is) and a package served as a source-controller
	// artifact would be.
	fleet := defaultFleet
	member, err := env.AddUser(envtest.User{Name: "member-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	memberKubeconfig, err := member.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	artifact := packageArtifact(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/fleet.tar.gz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(artifact)
	}))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256(artifact)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	commit := sha256.Sum256([]byte("a commit"))
	revision := "main@sha1:" + hex.EncodeToString(commit[:20])
	art := &meta.Artifact{Path: "gitrepository/" + fleet + "/fleet/fleet.tar.gz", URL: srv.URL + "/fleet.tar.gz",
		Revision: revision, Digest: digest, LastUpdateTime: metav1.Now(), Size: ptrTo(int64(len(artifact)))}

	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "member-kubeconfig", Namespace: fleet}, Data: map[string][]byte{"value": memberKubeconfig}},
		&v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "member", Namespace: fleet},
			Spec: v1alpha1.FleetClusterSpec{KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "member-kubeconfig"}}}},
		&sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: fleet},
			Spec: sourcev1.GitRepositorySpec{URL: "https://git.example.invalid/fleet.git", Interval: metav1.Duration{Duration: time.Minute},
				Reference: &sourcev1.GitRepositoryRef{Branch: "main"}}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	setArtifact(ctx, t, fleet, "fleet", art)

	// The controller, as the Deployment runs it, and a second replica: a standby.
	bin := buildController(t, dir)
	leader := startReplica(t, "a", bin, dir, kubeconfig, &dep)
	waitFor(ctx, t, time.Minute, "replica a to be ready", func() (bool, string) {
		return httpOK("http://" + leader.healthAddr + "/readyz"), "GET /readyz"
	})
	if !httpOK("http://" + leader.healthAddr + "/healthz") {
		t.Errorf("GET /healthz is not OK")
	}
	first := waitForHolder(ctx, t, "")
	standby := startReplica(t, "b", bin, dir, kubeconfig, &dep)
	waitFor(ctx, t, time.Minute, "the standby replica b to be ready", func() (bool, string) {
		return httpOK("http://" + standby.healthAddr + "/readyz"), "GET /readyz"
	})

	// The member is probed through its kubeconfig Secret.
	waitFor(ctx, t, time.Minute, "FleetCluster member to be Reachable", func() (bool, string) {
		var fc v1alpha1.FleetCluster
		if err := admin.Get(ctx, client.ObjectKey{Namespace: fleet, Name: "member"}, &fc); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ReachableCondition)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})

	// A rollout: the candidate is pinned; the pin gets its artifact (source-controller's part);
	// the pre-wave gates are decided and the member's Kustomization is applied.
	one := int32(1)
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: fleet},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet"},
			Path:      "./app",
			Template: v1alpha1.KustomizationTemplate{
				Interval: &metav1.Duration{Duration: time.Minute},
				Timeout:  &metav1.Duration{Duration: 30 * time.Second},
			},
			Waves:    []v1alpha1.Wave{{Name: "all", Count: &one}},
			Interval: &metav1.Duration{Duration: 5 * time.Second},
		},
	}
	if err := admin.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}
	var pin string
	waitFor(ctx, t, time.Minute, "the candidate's pinned source", func() (bool, string) {
		var list sourcev1.GitRepositoryList
		if err := admin.List(ctx, &list, client.InNamespace(fleet), client.MatchingLabels{v1alpha1.RolloutLabel: fr.Name}); err != nil {
			return false, err.Error()
		}
		if len(list.Items) != 1 {
			return false, fmt.Sprintf("%d pinned sources", len(list.Items))
		}
		pin = list.Items[0].Name
		return true, ""
	})
	setArtifact(ctx, t, fleet, pin, art)
	ksName := v1alpha1.KustomizationName(fr.Name, "member")
	waitFor(ctx, t, 2*time.Minute, "Kustomization "+ksName, func() (bool, string) {
		var ks kustomizev1.Kustomization
		err := admin.Get(ctx, client.ObjectKey{Namespace: fleet, Name: ksName}, &ks)
		if err != nil {
			var got v1alpha1.FleetRollout
			_ = admin.Get(ctx, client.ObjectKeyFromObject(fr), &got)
			return false, fmt.Sprintf("%v; rollout phase %q, conditions %+v", err, got.Status.Phase, got.Status.Conditions)
		}
		return ks.Spec.SourceRef.Name == pin, "sourceRef " + ks.Spec.SourceRef.Name
	})
	var receipts v1alpha1.GateReceiptList
	if err := admin.List(ctx, &receipts, client.InNamespace(fleet)); err != nil {
		t.Fatal(err)
	}
	gates := map[string]string{}
	for _, r := range receipts.Items {
		gates[r.Spec.Gate] = r.Spec.Result
	}
	for _, g := range []string{v1alpha1.GateDeploySafe, v1alpha1.GateRollbackSafe, v1alpha1.GateRollbackSucceeds} {
		if gates[g] != v1alpha1.ResultPass {
			t.Errorf("gate %s: receipt result %q, want %s (receipts: %v)", g, gates[g], v1alpha1.ResultPass, gates)
		}
	}

	// Events, in the fleet's namespace (about its objects) and in tidegate-system (leader election).
	for _, ns := range []string{fleet, namespace} {
		var events corev1.EventList
		if err := admin.List(ctx, &events, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(events.Items) == 0 {
			t.Errorf("the controller recorded no event in %s", ns)
		}
	}

	// Metrics: controller-runtime's, Flux's and tidegate's own.
	body := httpGet(t, "http://"+leader.metricsAddr+"/metrics")
	for _, m := range []string{
		`tidegate_gate_decisions_total{gate="deploySafe",name="app",namespace="` + fleet + `",result="Pass"}`,
		`tidegate_gate_decisions_total{gate="rollbackSucceeds",name="app",namespace="` + fleet + `",result="Pass"}`,
		`tidegate_evidence_collection_duration_seconds_count{gate="deploySafe"}`,
		`tidegate_rollout_phase{name="app",namespace="` + fleet + `",phase="Progressing"} 1`,
		`tidegate_rollout_phase{name="app",namespace="` + fleet + `",phase="Completed"} 0`,
		`tidegate_wave_start_timestamp_seconds{name="app",namespace="` + fleet + `",wave="all"}`,
		`tidegate_wave_phase{name="app",namespace="` + fleet + `",phase="Progressing",wave="all"} 1`,
		`tidegate_fleetcluster_reachable{name="member",namespace="` + fleet + `"}`,
		`controller_runtime_reconcile_total{controller="fleetrollout"`,
		`controller_runtime_reconcile_total{controller="fleetcluster"`,
		`gotk_reconcile_condition{kind="FleetRollout",name="app",namespace="` + fleet + `",status="Unknown",type="Ready"} 1`,
		`gotk_reconcile_duration_seconds_count{kind="FleetRollout",name="app",namespace="` + fleet + `"}`,
		`gotk_suspend_status{kind="FleetRollout",name="app",namespace="` + fleet + `"} 0`,
		`leader_election_master_status{name="` + leaseName + `"} 1`,
	} {
		if !strings.Contains(body, m) {
			t.Errorf("the metrics lack %s", m)
		}
	}

	if strings.Contains(httpGet(t, "http://"+standby.metricsAddr+"/metrics"), `leader_election_master_status{name="`+leaseName+`"} 1`) {
		t.Errorf("the standby replica says it leads")
	}
	if h := holder(ctx, t); h != first {
		t.Errorf("the Lease is held by %q, want still %q: the standby took it", h, first)
	}

	// Stopped as Kubernetes stops a pod: it exits cleanly within the pod's grace period and
	// releases its Lease, so the standby takes over at once. Then the standby stops.
	grace := time.Duration(*dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	leader.stop(t, grace)
	second := waitForHolder(ctx, t, first)
	if !strings.Contains(httpGet(t, "http://"+standby.metricsAddr+"/metrics"), `leader_election_master_status{name="`+leaseName+`"} 1`) {
		t.Errorf("replica b holds the Lease (%s) but does not say it leads", second)
	}
	standby.stop(t, grace)
	if h := holder(ctx, t); h != "" {
		t.Errorf("the Lease is still held by %s after both replicas stopped", h)
	}

	for _, r := range []*replica{leader, standby} {
		var lines []string
		for _, line := range strings.Split(r.logs.String(), "\n") {
			if strings.Contains(strings.ToLower(line), "forbidden") {
				lines = append(lines, line)
			}
		}
		if len(lines) > 0 {
			t.Errorf("replica %s was forbidden something:%s", r.name, joinLines(lines))
		}
	}
}

// replica is one tidegate-controller process.
type replica struct {
	name                    string
	args                    []string
	metricsAddr, healthAddr string
	cmd                     *exec.Cmd
	logs                    *testenv.LockedBuffer
	exited                  chan error
	stopped                 bool
}

// startReplica runs the manager binary as the Deployment's container runs it: its args, with the
// metrics and health addresses moved to free local ones, and its env, with the downward API resolved;
// in-cluster credentials are replaced by kubeconfig.
func startReplica(t *testing.T, name, bin, dir, kubeconfig string, dep *appsv1.Deployment) *replica {
	t.Helper()
	container := dep.Spec.Template.Spec.Containers[0]
	r := &replica{name: name, metricsAddr: freeAddr(t), healthAddr: freeAddr(t), logs: &testenv.LockedBuffer{}, exited: make(chan error, 1)}
	for _, a := range container.Args {
		switch {
		case strings.HasPrefix(a, "--metrics-addr="):
			a = "--metrics-addr=" + r.metricsAddr
		case strings.HasPrefix(a, "--health-addr="):
			a = "--health-addr=" + r.healthAddr
		}
		r.args = append(r.args, a)
	}
	env := []string{"KUBECONFIG=" + kubeconfig, "HOME=" + dir}
	for _, e := range container.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+dep.Namespace)
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		default:
			t.Fatalf("the test cannot resolve env %s of the Deployment", e.Name)
		}
	}
	r.cmd = exec.Command(bin, r.args...)
	r.cmd.Env, r.cmd.Dir, r.cmd.Stdout, r.cmd.Stderr = env, dir, r.logs, r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if !r.stopped {
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		if t.Failed() || os.Getenv("TIDEGATE_DEPLOY_LOGS") != "" {
			t.Logf("replica %s: tidegate-controller %s\n%s", r.name, strings.Join(r.args, " "), r.logs.String())
		}
	})
	return r
}

// stop sends SIGTERM, as the kubelet does, and fails the test unless the process exits cleanly within grace.
func (r *replica) stop(t *testing.T, grace time.Duration) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.exited:
		r.stopped = true
		if err != nil {
			t.Errorf("replica %s exited with %v after SIGTERM", r.name, err)
		}
	case <-time.After(grace):
		t.Fatalf("replica %s did not exit within the pod's grace period (%s) after SIGTERM", r.name, grace)
	}
}

// holder returns the identity holding the leader election Lease, "" when none does.
func holder(ctx context.Context, t *testing.T) string {
	t.Helper()
	var l coordinationv1.Lease
	if err := admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: leaseName}, &l); err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// waitForHolder waits until the Lease is held by someone other than previous, and returns who.
func waitForHolder(ctx context.Context, t *testing.T, previous string) string {
	t.Helper()
	var h string
	waitFor(ctx, t, time.Minute, "a new holder of the Lease", func() (bool, string) {
		var l coordinationv1.Lease
		if err := admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: leaseName}, &l); err != nil {
			return false, err.Error()
		}
		if l.Spec.HolderIdentity == nil {
			return false, "no holder"
		}
		h = *l.Spec.HolderIdentity
		return h != "" && h != previous, "held by " + h
	})
	return h
}

// packageArtifact is a source artifact holding one package at app/: a ConfigMap in namespace default.
func packageArtifact(t *testing.T) []byte {
	t.Helper()
	files := []struct{ name, body string }{
		{"app/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- configmap.yaml\n"},
		{"app/configmap.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-version\n  namespace: default\ndata:\n  version: v1\n"},
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// setArtifact writes a GitRepository's status as source-controller would after fetching art.
func setArtifact(ctx context.Context, t *testing.T, ns, name string, art *meta.Artifact) {
	t.Helper()
	var repo sourcev1.GitRepository
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &repo); err != nil {
		t.Fatal(err)
	}
	repo.Status.Artifact = art.DeepCopy()
	repo.Status.ObservedGeneration = repo.Generation
	repo.Status.Conditions = []metav1.Condition{{Type: meta.ReadyCondition, Status: metav1.ConditionTrue, Reason: meta.SucceededReason,
		Message: "stored artifact for revision '" + art.Revision + "'", LastTransitionTime: metav1.Now(), ObservedGeneration: repo.Generation}}
	if err := admin.Status().Update(ctx, &repo); err != nil {
		t.Fatalf("setting the artifact of GitRepository %s/%s: %v", ns, name, err)
	}
}

// buildController builds cmd/tidegate-controller into dir.
func buildController(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "tidegate-controller")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tidegate-controller")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tidegate-controller: %v\n%s", err, out)
	}
	return bin
}

func writeKubeconfig(t *testing.T, path, host string, ca []byte, user clientcmdapi.AuthInfo) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["hub"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	cfg.AuthInfos["tidegate-controller"] = &user
	cfg.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "tidegate-controller"}
	cfg.CurrentContext = "hub"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// freeAddr returns a free local TCP address.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpOK(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// waitFor polls cond until it holds, failing the test with cond's last word after timeout.
func waitFor(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, why := cond()
		last = why
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %s)", what, err, last)
	}
}

func ptrTo[T any](v T) *T { return &v }
