package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

// adminConfig reaches the package's API server directly, as an admin with a client certificate.
var (
	adminConfig *rest.Config
	envErr      error
	env         *envtest.Environment
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithEnvironment(m, func() (*envtest.Environment, error) {
		env, envErr = testbin.NewEnvironment("", 0)
		if envErr != nil {
			return nil, envErr
		}
		adminConfig, envErr = env.Start()
		if envErr != nil {
			_ = env.Stop()
			return nil, envErr
		}
		return env, nil
	}))
}

// proxied starts a proxy in front of the API server for t and returns a client-go clientset that
// reaches it through the proxy with the given request timeout (none when 0).
func proxied(t *testing.T, timeout time.Duration) (*Proxy, *kubernetes.Clientset) {
	t.Helper()
	if envErr != nil {
		t.Fatalf("no API server: %v", envErr)
	}
	p, err := New(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	cfg, err := p.Config(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = timeout
	return p, clientset(t, cfg)
}

func clientset(t *testing.T, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

var namespaces atomic.Int64

// namespace creates a new namespace for t directly and returns its name.
func namespace(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = fmt.Sprintf("%s-%d", name, namespaces.Add(1))
	_, err := clientset(t, adminConfig).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"k": "v"}}
}

// mustWork fails t unless a read through cs succeeds: the proxy is passing requests again.
func mustWork(t *testing.T, cs *kubernetes.Clientset, ns string) {
	t.Helper()
	if _, err := cs.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatalf("with no fault set, a list through the proxy failed: %v", err)
	}
}

// patchA sets k=w on the ConfigMap a, as a server-side dry-run when dryRun.
func patchA(cs *kubernetes.Clientset, ns string, dryRun bool) error {
	opts := metav1.PatchOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := cs.CoreV1().ConfigMaps(ns).Patch(context.Background(), "a", types.MergePatchType, []byte(`{"data":{"k":"w"}}`), opts)
	return err
}

// nextEvent returns the next event of w, or false when none comes within wait.
func nextEvent(w watch.Interface, wait time.Duration) (watch.Event, bool) {
	select {
	case ev, ok := <-w.ResultChan():
		return ev, ok
	case <-time.After(wait):
		return watch.Event{}, false
	}
}

// With no fault set the proxy is not there: writes, reads and a watch work through it, the API
// server sees the client as itself (its own certificate is passed on), a client certificate the proxy
// was not given is refused with a message that says so, and nothing is counted as injected.
func TestNoFaultPassesEverythingThrough(t *testing.T) {
	p, cs := proxied(t, 0)
	ns := namespace(t)
	ctx := context.Background()

	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, "a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("get through the proxy: %v %+v", err, got)
	}
	if ev, ok := nextEvent(w, 30*time.Second); !ok || ev.Type != watch.Added {
		t.Fatalf("the watch through the proxy should see the ConfigMap added: %v %+v", ok, ev)
	}
	// An object created directly reaches the watch through the proxy as well.
	if _, err := clientset(t, adminConfig).CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, "b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev, ok := nextEvent(w, 30*time.Second); !ok || ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != "b" {
		t.Fatalf("the watch through the proxy should see b added: %v %+v", ok, ev)
	}

	whoami := func(cs *kubernetes.Clientset) authnv1.UserInfo {
		t.Helper()
		r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.UserInfo
	}
	direct, through := whoami(clientset(t, adminConfig)), whoami(cs)
	if through.Username != direct.Username || fmt.Sprint(through.Groups) != fmt.Sprint(direct.Groups) {
		t.Errorf("through the proxy the API server sees %+v, directly %+v", through, direct)
	}

	// A user the proxy was not told about is refused, not passed on as someone else.
	user, err := env.AddUser(envtest.User{Name: "stranger", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stranger := rest.CopyConfig(user.Config())
	stranger.Host, stranger.CAData = p.URL, p.CA()
	_, err = clientset(t, stranger).CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{})
	if !apierrors.IsUnauthorized(err) || !strings.Contains(err.Error(), `client certificate of "stranger"`) {
		t.Errorf("an unknown client certificate should be refused by name: %v", err)
	}
	if req, inj := p.Counts(); req == 0 || inj != 0 {
		t.Errorf("counts: %d requests, %d injected; want some and none", req, inj)
	}
}

// Latency holds each request: a client whose timeout is shorter than the delay times out, one whose
// timeout is longer gets its answer, and once cleared the short one gets its answer too.
func TestLatencyHoldsEachRequest(t *testing.T) {
	p, patient := proxied(t, time.Minute)
	ns := namespace(t)
	cfg, err := p.Config(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 500 * time.Millisecond
	hasty := clientset(t, cfg)
	ctx := context.Background()

	p.Set(Latency(3 * time.Second))
	if _, err := hasty.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err == nil || !isTimeout(err) {
		t.Errorf("a client with a 500ms timeout behind a 3s delay should time out: %v", err)
	}
	if _, err := patient.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("a client with a minute's timeout should get its answer late: %v", err)
	}
	p.Clear()
	mustWork(t, hasty, ns)
	if _, inj := p.Counts(); inj != 2 {
		t.Errorf("%d requests delayed, want 2", inj)
	}
}

func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || utilnet.IsTimeout(err) || strings.Contains(err.Error(), "Client.Timeout exceeded")
}

// A 429 with Retry-After is retried by client-go after the wait: with one request in two refused,
// every call succeeds and the proxy saw twice as many requests as calls. Without Retry-After,
// client-go does not retry and the caller sees TooManyRequests.
func TestTooManyRequestsIsRetriedByClientGo(t *testing.T) {
	p, cs := proxied(t, time.Minute)
	ns := namespace(t)
	ctx := context.Background()

	p.Set(TooManyRequests(time.Second).Only(Resource("configmaps")).OneIn(2))
	before, _ := p.Counts()
	for i := range 3 {
		if _, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("call %d: client-go should have retried the 429: %v", i, err)
		}
	}
	after, injected := p.Counts()
	if after-before != 6 || injected != 3 {
		t.Errorf("3 calls: %d requests, %d refused; want 6 and 3", after-before, injected)
	}

	p.Set(TooManyRequests(0))
	_, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsTooManyRequests(err) {
		t.Errorf("a 429 without Retry-After should reach the caller: %v", err)
	}
	p.Clear()
	mustWork(t, cs, ns)
}

// 500 and 503 reach the caller as the API server's own errors would; scoped to dry-run PATCHes, only
// those fail while the real patch and the reads pass.
func TestServerErrorsAllOrOnlyDryRunPatches(t *testing.T) {
	p, cs := proxied(t, time.Minute)
	ns := namespace(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, "a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	p.Set(ServerError(500))
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{}); !apierrors.IsInternalError(err) {
		t.Errorf("want InternalError: %v", err)
	}
	p.Set(ServerError(503))
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("want ServiceUnavailable: %v", err)
	}

	p.Set(ServerError(503).Only(Method("PATCH"), DryRun()))
	if err := patchA(cs, ns, true); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("a dry-run patch should meet the 503: %v", err)
	}
	if err := patchA(cs, ns, false); err != nil {
		t.Errorf("a real patch should pass: %v", err)
	}
	if got, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{}); err != nil || got.Data["k"] != "w" {
		t.Errorf("a read should pass and see the patch: %v %+v", err, got)
	}
	p.Clear()
	mustWork(t, cs, ns)
}

// A late request reaches the API server after the client gave up on it: the create times out for
// the client, and the ConfigMap is there all the same once the delay has passed, the server's
// answer (201) kept. A write whose object changed meanwhile gets the server's Conflict.
func TestLateRequestsArriveAfterTheirClientLeft(t *testing.T) {
	p, cs := proxied(t, time.Minute)
	ns := namespace(t)
	ctx := context.Background()
	p.Set(Late(2*time.Second).Only(Method("POST"), Resource("configmaps")))
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := cs.CoreV1().ConfigMaps(ns).Create(short, configMap(ns, "late"), metav1.CreateOptions{})
	cancel()
	if err == nil {
		t.Fatal("the client should have given up on its create")
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(p.LateAnswers()) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := p.LateAnswers(); len(got) != 1 || got[0] != http.StatusCreated {
		t.Fatalf("late answers %v, want [201]", got)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "late", metav1.GetOptions{}); err != nil {
		t.Fatalf("the late create did not reach the server: %v", err)
	}

	// A stale update held past a newer one is refused by the server.
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "late", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, injected := p.Counts()
	p.Set(Late(2*time.Second).Only(Method("PUT"), Resource("configmaps")))
	stale := cm.DeepCopy()
	stale.Data = map[string]string{"k": "stale"}
	done := make(chan error, 1)
	go func() { _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, stale, metav1.UpdateOptions{}); done <- err }()
	for _, n := p.Counts(); n == injected; _, n = p.Counts() {
		time.Sleep(10 * time.Millisecond)
	}
	p.Clear()
	cm.Data = map[string]string{"k": "newer"}
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !apierrors.IsConflict(err) {
		t.Errorf("the stale update held past a newer one: %v, want a Conflict", err)
	}
	if got := p.LateAnswers(); len(got) != 2 || got[1] != http.StatusConflict {
		t.Errorf("late answers %v, want [201 409]", got)
	}
}

// A reset breaks the connections that are open (a running watch ends) and every new one: a create
// fails with "connection reset by peer". Cleared, everything works again.
func TestResetBreaksOpenAndNewConnections(t *testing.T) {
	p, cs := proxied(t, time.Minute)
	ns := namespace(t)
	ctx := context.Background()
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	p.Set(ResetConnections())
	if ev, ok := nextEvent(w, 30*time.Second); ok {
		t.Errorf("the watch should end when its connection is reset, got %+v", ev)
	}
	_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, "a"), metav1.CreateOptions{})
	if err == nil || !utilnet.IsConnectionReset(err) {
		t.Errorf("a create should fail with a connection reset: %v", err)
	}
	p.Clear()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, "a"), metav1.CreateOptions{}); err != nil {
		t.Errorf("cleared, the create should work: %v", err)
	}
}

// A black hole answers nothing: a client times out, and a running watch receives nothing while it is
// open; cleared, the watch receives what it was held back and requests are answered again. Scoped to
// dry-run PATCHes, only those hang.
func TestBlackholeStallsUntilCleared(t *testing.T) {
	p, cs := proxied(t, 0)
	ns := namespace(t)
	ctx := context.Background()
	cfg, err := p.Config(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = time.Second
	hasty := clientset(t, cfg)
	if _, err := hasty.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, "a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev, ok := nextEvent(w, 30*time.Second); !ok || ev.Type != watch.Added {
		t.Fatalf("the watch should start with a: %v %+v", ok, ev)
	}

	p.Set(Blackhole())
	if _, err := hasty.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{}); err == nil || !isTimeout(err) {
		t.Errorf("behind a black hole a client should time out: %v", err)
	}
	if _, err := clientset(t, adminConfig).CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, "b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev, ok := nextEvent(w, 2*time.Second); ok {
		t.Errorf("nothing should reach the watch through the black hole, got %+v", ev)
	}
	p.Clear()
	if ev, ok := nextEvent(w, 30*time.Second); !ok || ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != "b" {
		t.Errorf("cleared, the watch should receive b: %v %+v", ok, ev)
	}
	mustWork(t, hasty, ns)

	p.Set(Blackhole().Only(Method("PATCH"), DryRun()))
	if err := patchA(hasty, ns, true); err == nil || !isTimeout(err) {
		t.Errorf("a dry-run patch should hang and time out: %v", err)
	}
	if err := patchA(hasty, ns, false); err != nil {
		t.Errorf("a real patch should pass: %v", err)
	}
}

// Faults switched on and off while clients keep calling: every call made after the last Clear
// succeeds, and while a 503 was set calls saw it (Set and Clear take effect at once, from any
// goroutine).
func TestFaultsSwitchWhileClientsRun(t *testing.T) {
	p, cs := proxied(t, 10*time.Second)
	ns := namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	unavailable := 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
				if apierrors.IsServiceUnavailable(err) {
					mu.Lock()
					unavailable++
					mu.Unlock()
				}
			}
		}()
	}
	for range 20 {
		p.Set(ServerError(503))
		time.Sleep(20 * time.Millisecond)
		p.Set(Latency(time.Millisecond))
		time.Sleep(20 * time.Millisecond)
		p.Clear()
	}
	cancel()
	wg.Wait()
	if unavailable == 0 {
		t.Errorf("no call saw the 503 set 20 times")
	}
	for range 10 {
		mustWork(t, cs, ns)
	}
}
