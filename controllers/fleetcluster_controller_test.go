package controllers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/localfleet"
)

// TestFleetClusterReconciler runs the reconciler in a manager against a real hub and member API servers.
func TestFleetClusterReconciler(t *testing.T) {
	f := localfleet.StartForTest(t, localfleet.Options{Members: 2, NoFlux: true})
	env := fcStartManager(t, f)
	ctx := context.Background()
	ns := fcNamespace(t, f)

	member1 := fcMemberKubeConfig(t, f, "member-1")
	member2 := fcMemberKubeConfig(t, f, "member-2")
	hidden := fcCredentials(t, member1, member2)
	const badToken = "fc-integration-token-8d41b7"
	hidden = append(hidden, badToken)

	t.Run("valid kubeconfig becomes Ready with the server version", func(t *testing.T) {
		fcSecret(t, f, ns, "member-1-kubeconfig", "value", member1)
		fc := fcCreate(t, f, ns, "member-1", "member-1-kubeconfig", "", false)
		want := fcServerVersion(t, f, "member-1")

		got := fcWaitFor(t, f, fc, "Ready=True", func(fc *v1alpha1.FleetCluster) bool {
			return settled(fc) && conditions.IsTrue(fc, v1alpha1.ReadyCondition)
		})
		fcExpectCondition(t, got, v1alpha1.ReachableCondition, metav1.ConditionTrue, v1alpha1.ReachableReason, "API server "+want+" answered")
		fcExpectCondition(t, got, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReachableReason, "API server "+want+" answered")
		if got.Status.ServerVersion != want {
			t.Errorf("serverVersion = %q, want %q", got.Status.ServerVersion, want)
		}
		if got.Status.LastObservedTime == nil || time.Since(got.Status.LastObservedTime.Time) > time.Minute {
			t.Errorf("lastObservedTime = %v, want about now", got.Status.LastObservedTime)
		}
		if got.Status.ObservedGeneration != got.Generation {
			t.Errorf("observedGeneration = %d, want %d", got.Status.ObservedGeneration, got.Generation)
		}
	})

	t.Run("a probe that sees nothing new writes nothing and reads no Secret", func(t *testing.T) {
		before := fcGet(t, f, ns, "member-1")
		// lastObservedTime has a resolution of one second: let a second pass so a rewrite would show.
		time.Sleep(1100 * time.Millisecond)
		requests := env.hub.snapshot()
		key := types.NamespacedName{Namespace: ns, Name: "member-1"}
		for range 3 {
			env.r.forgetProbe(key) // due now: each reconcile probes the member
			res, err := env.r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter <= 0 || res.RequeueAfter > time.Hour {
				t.Errorf("requeueAfter = %v, want within the 1h interval", res.RequeueAfter)
			}
		}
		after := fcGet(t, f, ns, "member-1")
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("resourceVersion moved from %s to %s; status before %+v, after %+v",
				before.ResourceVersion, after.ResourceVersion, before.Status, after.Status)
		}
		// The manager's requests to the hub over those probes: none (cached reads, an unchanged
		// Secret, nothing to write).
		if got := env.hub.since(requests); len(got) != 0 {
			t.Errorf("3 probes of an unchanged cluster made hub requests %v, want none", got)
		}
	})

	t.Run("status.rollouts follows the cluster's Kustomizations", func(t *testing.T) {
		observed := fcGet(t, f, ns, "member-1").Status.LastObservedTime
		time.Sleep(1100 * time.Millisecond)
		web := fcKustomization(t, f, ns, "web-member-1", "member-1", "web", "main@sha1:aaa")
		api := fcKustomization(t, f, ns, "api-member-1", "member-1", "api", "main@sha1:ccc")
		fcKustomization(t, f, ns, "web-member-2", "member-2", "web", "main@sha1:zzz")
		fcSetApplied(t, f, web, "main@sha1:bbb")
		fcSetApplied(t, f, api, "main@sha1:ccc")

		fcWaitForRollouts(t, f, ns, "member-1", []v1alpha1.ClusterRolloutStatus{
			{Name: "api", DesiredRevision: "main@sha1:ccc", LiveRevision: "main@sha1:ccc"},
			{Name: "web", DesiredRevision: "main@sha1:aaa", LiveRevision: "main@sha1:bbb", Drift: true},
		})
		// A status-only change of the Kustomization is enough to refresh the cluster.
		fcSetApplied(t, f, web, "main@sha1:aaa")
		fcWaitForRollouts(t, f, ns, "member-1", []v1alpha1.ClusterRolloutStatus{
			{Name: "api", DesiredRevision: "main@sha1:ccc", LiveRevision: "main@sha1:ccc"},
			{Name: "web", DesiredRevision: "main@sha1:aaa", LiveRevision: "main@sha1:aaa"},
		})
		if err := f.Hub.Delete(ctx, api); err != nil {
			t.Fatal(err)
		}
		got := fcWaitForRollouts(t, f, ns, "member-1", []v1alpha1.ClusterRolloutStatus{
			{Name: "web", DesiredRevision: "main@sha1:aaa", LiveRevision: "main@sha1:aaa"},
		})
		// Kustomization events refresh status.rollouts; they do not probe ahead of spec.interval.
		if !got.Status.LastObservedTime.Equal(observed) {
			t.Errorf("lastObservedTime moved from %v to %v on Kustomization events", observed, got.Status.LastObservedTime)
		}
	})

	t.Run("missing Secret is a KubeConfigError until it is created", func(t *testing.T) {
		fc := fcCreate(t, f, ns, "member-2", "member-2-kubeconfig", "", false)
		got := fcWaitFor(t, f, fc, "Ready=False KubeConfigError", func(fc *v1alpha1.FleetCluster) bool {
			return settled(fc) && conditions.IsFalse(fc, v1alpha1.ReadyCondition) && conditions.GetReason(fc, v1alpha1.ReadyCondition) == v1alpha1.KubeConfigErrorReason
		})
		fcExpectCondition(t, got, v1alpha1.ReachableCondition, metav1.ConditionFalse, v1alpha1.KubeConfigErrorReason, ns+"/member-2-kubeconfig not found")
		if got.Status.LastObservedTime != nil || got.Status.ServerVersion != "" {
			t.Errorf("lastObservedTime = %v, serverVersion = %q; want neither", got.Status.LastObservedTime, got.Status.ServerVersion)
		}
		if got.Status.ObservedGeneration != got.Generation {
			t.Errorf("observedGeneration = %d, want %d", got.Status.ObservedGeneration, got.Generation)
		}

		// Secrets are not watched: the fix is picked up at the next interval or on request.
		fcSecret(t, f, ns, "member-2-kubeconfig", "value", member2)
		patch := client.MergeFrom(got.DeepCopy())
		got.Annotations = map[string]string{meta.ReconcileRequestAnnotation: "fc-request-1"}
		if err := f.Hub.Patch(ctx, got, patch); err != nil {
			t.Fatal(err)
		}
		got = fcWaitFor(t, f, fc, "Ready=True after the request", func(fc *v1alpha1.FleetCluster) bool {
			return settled(fc) && conditions.IsTrue(fc, v1alpha1.ReadyCondition)
		})
		if got.Status.LastHandledReconcileAt != "fc-request-1" {
			t.Errorf("lastHandledReconcileAt = %q, want fc-request-1", got.Status.LastHandledReconcileAt)
		}
		if want := fcServerVersion(t, f, "member-2"); got.Status.ServerVersion != want {
			t.Errorf("serverVersion = %q, want %q", got.Status.ServerVersion, want)
		}
	})

	t.Run("closed port is Unreachable without lastObservedTime", func(t *testing.T) {
		fcSecret(t, f, ns, "closed-kubeconfig", "value.yaml", fcRewriteServer(t, member1, "https://127.0.0.1:1", ""))
		fc := fcCreate(t, f, ns, "closed", "closed-kubeconfig", "", false)
		got := fcWaitFor(t, f, fc, "Ready=False Unreachable", func(fc *v1alpha1.FleetCluster) bool {
			return settled(fc) && conditions.IsFalse(fc, v1alpha1.ReadyCondition) && conditions.GetReason(fc, v1alpha1.ReadyCondition) == v1alpha1.UnreachableReason
		})
		fcExpectCondition(t, got, v1alpha1.ReachableCondition, metav1.ConditionFalse, v1alpha1.UnreachableReason, "127.0.0.1:1")
		if got.Status.LastObservedTime != nil || got.Status.ServerVersion != "" {
			t.Errorf("lastObservedTime = %v, serverVersion = %q; want neither", got.Status.LastObservedTime, got.Status.ServerVersion)
		}
	})

	t.Run("a server that never answers is Unreachable within the probe timeout", func(t *testing.T) {
		// Accepts connections and says nothing: without a deadline the probe would wait for ever.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		fcSecret(t, f, ns, "silent-kubeconfig", "value", fcRewriteServer(t, member1, "https://"+l.Addr().String(), ""))
		fc := fcCreate(t, f, ns, "silent", "silent-kubeconfig", "", false)
		got := fcWaitFor(t, f, fc, "Ready=False Unreachable", func(fc *v1alpha1.FleetCluster) bool {
			return settled(fc) && conditions.GetReason(fc, v1alpha1.ReadyCondition) == v1alpha1.UnreachableReason
		})
		fcExpectCondition(t, got, v1alpha1.ReachableCondition, metav1.ConditionFalse, v1alpha1.UnreachableReason, l.Addr().String())
	})

	t.Run("refused credentials are a KubeConfigError", func(t *testing.T) {
		kc := fcRewriteServer(t, member1, "", badToken)
		fcSecret(t, f, ns, "bad-token-kubeconfig", "token", kc)
		fc := fcCreate(t, f, ns, "bad-token", "bad-token-kubeconfig", "token", false)
		got := fcWaitFor(t, f, fc, "Ready=False KubeConfigError", func(fc *v1alpha1.FleetCluster) bool {
			return settled(fc) && conditions.IsFalse(fc, v1alpha1.ReadyCondition) && conditions.GetReason(fc, v1alpha1.ReadyCondition) == v1alpha1.KubeConfigErrorReason
		})
		fcExpectCondition(t, got, v1alpha1.ReachableCondition, metav1.ConditionFalse, v1alpha1.KubeConfigErrorReason,
			"refused the credentials of kubeconfig Secret "+ns+"/bad-token-kubeconfig")
	})

	t.Run("invalid kubeconfig is a KubeConfigError", func(t *testing.T) {
		fcSecret(t, f, ns, "garbage-kubeconfig", "value", []byte("users: ["+badToken+"\n  : {"))
		fc := fcCreate(t, f, ns, "garbage", "garbage-kubeconfig", "", false)
		got := fcWaitFor(t, f, fc, "Ready=False KubeConfigError", func(fc *v1alpha1.FleetCluster) bool {
			return settled(fc) && conditions.IsFalse(fc, v1alpha1.ReadyCondition) && conditions.GetReason(fc, v1alpha1.ReadyCondition) == v1alpha1.KubeConfigErrorReason
		})
		fcExpectCondition(t, got, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.KubeConfigErrorReason,
			"invalid kubeconfig in Secret "+ns+"/garbage-kubeconfig")
	})

	t.Run("suspended cluster is neither probed nor written", func(t *testing.T) {
		fc := fcCreate(t, f, ns, "suspended", "member-1-kubeconfig", "", true)
		before := fcGet(t, f, ns, "suspended")
		if _, err := env.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(fc)}); err != nil {
			t.Fatal(err)
		}
		after := fcGet(t, f, ns, "suspended")
		if after.ResourceVersion != before.ResourceVersion || !reflect.DeepEqual(after.Status, v1alpha1.FleetClusterStatus{}) {
			t.Errorf("suspended cluster was written: status %+v", after.Status)
		}
	})

	t.Run("no credentials in status, events or logs", func(t *testing.T) {
		var list v1alpha1.FleetClusterList
		if err := f.Hub.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) < 5 {
			t.Fatalf("found %d FleetClusters, want the ones created above", len(list.Items))
		}
		var status bytes.Buffer
		for _, fc := range list.Items {
			b, err := json.Marshal(fc.Status)
			if err != nil {
				t.Fatal(err)
			}
			status.Write(b)
		}
		events, logs := env.recorded()
		t.Logf("events:\n%s", events)
		if !strings.Contains(events, v1alpha1.KubeConfigErrorReason) || !strings.Contains(logs, "cluster readiness changed") {
			t.Fatalf("events or logs were not captured: events %q", events)
		}
		for where, text := range map[string]string{"status": status.String(), "events": events, "logs": logs} {
			for _, s := range hidden {
				if strings.Contains(text, s) {
					t.Errorf("%s contain a credential of a kubeconfig (%d characters starting %.6q)", where, len(s), s)
				}
			}
		}
	})
}

func TestFleetClusterRolloutsFromKustomizations(t *testing.T) {
	ks := func(name, rollout, desired, live string) kustomizev1.Kustomization {
		k := kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{v1alpha1.ClusterLabel: "c1"},
			Annotations: map[string]string{},
		}}
		if rollout != "" {
			k.Labels[v1alpha1.RolloutLabel] = rollout
		}
		if desired != "" {
			k.Annotations[v1alpha1.RevisionAnnotation] = desired
		}
		k.Status.LastAppliedRevision = live
		return k
	}
	got := clusterRollouts([]kustomizev1.Kustomization{
		ks("zeta-c1", "zeta", "r2", "r1"),
		ks("alpha-c1", "alpha", "r1", "r1"),
		ks("new-c1", "new", "r1", ""),
		ks("old-c1", "old", "", "r0"),
		ks("unlabelled", "", "r1", "r2"),
		ks("b-dup", "dup", "r2", "r2"),
		ks("a-dup", "dup", "r1", "r2"),
	})
	want := []v1alpha1.ClusterRolloutStatus{
		{Name: "alpha", DesiredRevision: "r1", LiveRevision: "r1"},
		{Name: "dup", DesiredRevision: "r1", LiveRevision: "r2", Drift: true},
		{Name: "new", DesiredRevision: "r1"},
		{Name: "old", LiveRevision: "r0"},
		{Name: "zeta", DesiredRevision: "r2", LiveRevision: "r1", Drift: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("clusterRollouts =\n%+v\nwant\n%+v", got, want)
	}
	if got := clusterRollouts([]kustomizev1.Kustomization(nil)); got != nil {
		t.Errorf("no Kustomizations gave %+v, want nil so status does not flip between null and []", got)
	}
}

func TestFleetClusterKustomizationPredicate(t *testing.T) {
	base := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{
		Name: "web-c1", Namespace: "fleet",
		Labels:      map[string]string{v1alpha1.ClusterLabel: "c1", v1alpha1.RolloutLabel: "web"},
		Annotations: map[string]string{v1alpha1.RevisionAnnotation: "r1"},
	}}
	changed := func(edit func(k *kustomizev1.Kustomization)) bool {
		k := base.DeepCopy()
		edit(k)
		return clusterRolloutViewChanged{}.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: k})
	}
	for name, tc := range map[string]struct {
		edit func(k *kustomizev1.Kustomization)
		want bool
	}{
		"applied revision":       {func(k *kustomizev1.Kustomization) { k.Status.LastAppliedRevision = "r1" }, true},
		"desired revision":       {func(k *kustomizev1.Kustomization) { k.Annotations[v1alpha1.RevisionAnnotation] = "r2" }, true},
		"cluster label":          {func(k *kustomizev1.Kustomization) { k.Labels[v1alpha1.ClusterLabel] = "c2" }, true},
		"rollout label":          {func(k *kustomizev1.Kustomization) { delete(k.Labels, v1alpha1.RolloutLabel) }, true},
		"other status":           {func(k *kustomizev1.Kustomization) { k.Status.LastAttemptedRevision = "r9" }, false},
		"spec":                   {func(k *kustomizev1.Kustomization) { k.Spec.Path = "./other" }, false},
		"unrelated label change": {func(k *kustomizev1.Kustomization) { k.Labels["team"] = "a" }, false},
	} {
		if got := changed(tc.edit); got != tc.want {
			t.Errorf("%s: update passes = %v, want %v", name, got, tc.want)
		}
	}
	unlabelled := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
	if (clusterRolloutViewChanged{}).Create(event.CreateEvent{Object: unlabelled}) {
		t.Error("a Kustomization without the cluster label passed")
	}
	if !(clusterRolloutViewChanged{}).Create(event.CreateEvent{Object: base}) {
		t.Error("a Kustomization with the cluster label did not pass")
	}
	reqs := fleetClusterForKustomization(context.Background(), base)
	if len(reqs) != 1 || reqs[0].Namespace != "fleet" || reqs[0].Name != "c1" {
		t.Errorf("mapped to %v, want fleet/c1", reqs)
	}
}

func TestFleetClusterReadyFollowsReachable(t *testing.T) {
	fc := &v1alpha1.FleetCluster{}
	markReachable(fc, metav1.ConditionFalse, v1alpha1.UnreachableReason, "down")
	fcExpectCondition(t, fc, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.UnreachableReason, "down")
	markReachable(fc, metav1.ConditionTrue, v1alpha1.ReachableReason, "API server v1.0.0 answered")
	fcExpectCondition(t, fc, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReachableReason, "API server v1.0.0 answered")
	if c := conditions.Get(fc, v1alpha1.ReadyCondition); c.Message != "API server v1.0.0 answered" {
		t.Errorf("Ready message = %q, want Reachable's message unchanged", c.Message)
	}
}

// fcEnv is a running manager with the FleetCluster reconciler and what it recorded.
type fcEnv struct {
	r *FleetClusterReconciler
	// hub counts the manager's requests to the hub.
	hub    requestCounter
	mu     sync.Mutex
	events []string
	logs   bytes.Buffer
}

func (e *fcEnv) recorded() (events, logs string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.events, "\n"), e.logs.String()
}

// Eventf records an event as the events.EventRecorder the controller is given.
func (e *fcEnv) Eventf(_, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, eventtype+" "+reason+" "+fmt.Sprintf(note, args...))
}

func fcStartManager(t *testing.T, f *localfleet.Fleet) *fcEnv {
	t.Helper()
	env := &fcEnv{}
	logger := funcr.New(func(prefix, args string) {
		env.mu.Lock()
		defer env.mu.Unlock()
		fmt.Fprintln(&env.logs, prefix, args)
	}, funcr.Options{Verbosity: 1})
	skipNameValidation := true
	opts := ManagerOptions(ManagerConfig{Logger: logger})
	opts.Controller = config.Controller{SkipNameValidation: &skipNameValidation}
	mgr, err := ctrl.NewManager(env.hub.wrap(f.HubConfig), opts)
	if err != nil {
		t.Fatal(err)
	}
	env.r = &FleetClusterReconciler{Client: mgr.GetClient(), EventRecorder: env, HubConfig: f.HubConfig, ProbeTimeout: 5 * time.Second}
	if err := env.r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return env
}

func fcNamespace(t *testing.T, f *localfleet.Fleet) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fleetcluster-"}}
	if err := f.Hub.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func fcMemberKubeConfig(t *testing.T, f *localfleet.Fleet, member string) []byte {
	t.Helper()
	var s corev1.Secret
	key := types.NamespacedName{Namespace: f.Namespace, Name: f.Member(member).KubeConfigSecret}
	if err := f.Hub.Get(context.Background(), key, &s); err != nil {
		t.Fatal(err)
	}
	return s.Data["value"]
}

// fcCredentials returns the secret parts of kubeconfigs as they could leak: raw, base64 and one PEM line.
func fcCredentials(t *testing.T, kubeconfigs ...[]byte) []string {
	t.Helper()
	var out []string
	for _, kc := range kubeconfigs {
		cfg, err := clientcmd.Load(kc)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range cfg.AuthInfos {
			for _, secret := range [][]byte{u.ClientKeyData, []byte(u.Token), []byte(u.Password)} {
				if len(secret) == 0 {
					continue
				}
				out = append(out, string(secret), base64.StdEncoding.EncodeToString(secret))
				if lines := strings.Split(string(secret), "\n"); len(lines) > 2 {
					out = append(out, lines[1])
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("the member kubeconfigs hold no credentials to check for")
	}
	return out
}

// fcRewriteServer returns kubeconfig with every cluster's server set to server and, when token is
// set, every user authenticating with that token only.
func fcRewriteServer(t *testing.T, kubeconfig []byte, server, token string) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if server != "" {
		for _, c := range cfg.Clusters {
			c.Server = server
		}
	}
	if token != "" {
		for name := range cfg.AuthInfos {
			cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
		}
	}
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fcServerVersion(t *testing.T, f *localfleet.Fleet, member string) string {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(f.Member(member).Config)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	return info.GitVersion
}

func fcSecret(t *testing.T, f *localfleet.Fleet, ns, name, key string, data []byte) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string][]byte{key: data}}
	if err := f.Hub.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func fcCreate(t *testing.T, f *localfleet.Fleet, ns, name, secret, key string, suspend bool) *v1alpha1.FleetCluster {
	t.Helper()
	fc := &v1alpha1.FleetCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.FleetClusterSpec{
			KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: secret, Key: key}},
			Suspend:    suspend,
			// Long enough that no interval passes during the test: every probe seen is one the test caused.
			Interval: &metav1.Duration{Duration: time.Hour},
		},
	}
	if err := f.Hub.Create(context.Background(), fc); err != nil {
		t.Fatal(err)
	}
	return fc
}

func fcGet(t *testing.T, f *localfleet.Fleet, ns, name string) *v1alpha1.FleetCluster {
	t.Helper()
	fc := &v1alpha1.FleetCluster{}
	if err := f.Hub.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, fc); err != nil {
		t.Fatal(err)
	}
	return fc
}

func fcWaitFor(t *testing.T, f *localfleet.Fleet, fc *v1alpha1.FleetCluster, what string, ok func(*v1alpha1.FleetCluster) bool) *v1alpha1.FleetCluster {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := fcGet(t, f, fc.Namespace, fc.Name)
		if ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("fleetcluster %s/%s: not %s after 60s; status %+v", fc.Namespace, fc.Name, what, got.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func fcWaitForRollouts(t *testing.T, f *localfleet.Fleet, ns, name string, want []v1alpha1.ClusterRolloutStatus) *v1alpha1.FleetCluster {
	t.Helper()
	fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	return fcWaitFor(t, f, fc, fmt.Sprintf("rollouts %+v", want), func(fc *v1alpha1.FleetCluster) bool {
		return reflect.DeepEqual(fc.Status.Rollouts, want)
	})
}

func fcExpectCondition(t *testing.T, fc *v1alpha1.FleetCluster, typ string, status metav1.ConditionStatus, reason, messagePart string) {
	t.Helper()
	c := conditions.Get(fc, typ)
	if c == nil {
		t.Errorf("no %s condition; conditions %+v", typ, fc.Status.Conditions)
		return
	}
	if c.Status != status || c.Reason != reason || !strings.Contains(c.Message, messagePart) {
		t.Errorf("%s = %s/%s %q, want %s/%s with %q", typ, c.Status, c.Reason, c.Message, status, reason, messagePart)
	}
}

func fcKustomization(t *testing.T, f *localfleet.Fleet, ns, name, cluster, rollout, revision string) *kustomizev1.Kustomization {
	t.Helper()
	k := &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels:      map[string]string{v1alpha1.ClusterLabel: cluster, v1alpha1.RolloutLabel: rollout},
			Annotations: map[string]string{v1alpha1.RevisionAnnotation: revision},
		},
		Spec: kustomizev1.KustomizationSpec{
			Interval:  metav1.Duration{Duration: time.Hour},
			Prune:     true,
			Suspend:   true,
			SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: "GitRepository", Name: "none"},
		},
	}
	if err := f.Hub.Create(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	return k
}

func fcSetApplied(t *testing.T, f *localfleet.Fleet, k *kustomizev1.Kustomization, revision string) {
	t.Helper()
	k.Status.LastAppliedRevision = revision
	if err := f.Hub.Status().Update(context.Background(), k); err != nil {
		t.Fatal(err)
	}
}

// settled tells whether the status was written for the current generation. Flux's patch helper
// writes conditions and the other status fields in two requests, so a reader can see a new Ready
// before the observedGeneration that goes with it; kstatus readers wait for both, and so do these tests.
func settled(fc *v1alpha1.FleetCluster) bool { return fc.Status.ObservedGeneration == fc.Generation }
