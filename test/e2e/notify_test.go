package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
)

// notifications is the shared fleet's notification-controller: started on the shared hub by the
// first scenario that needs it, with the CRDs config/notifications patches, and stopped with the
// fleet. On the shared fleet, not one of its own, because it reaches across no namespace: each
// scenario's Alerts and Providers live in its own namespace, and only its own controller is given
// the events address.
var notifications struct {
	once sync.Once
	err  error
}

// notificationController starts the shared fleet's notification-controller once and returns its
// events address.
func (s *fleetSetup) notificationController(t *testing.T) string {
	t.Helper()
	if !s.shared {
		t.Fatal("notificationController runs on the shared fleet")
	}
	notifications.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		notifications.err = s.f.StartNotificationController(ctx, patchedNotificationCRDs)
	})
	if notifications.err != nil {
		t.Fatalf("starting notification-controller on the shared hub: %v", notifications.err)
	}
	return s.f.EventsAddr
}

// patchedNotificationCRDs are the CRDs of notification-controller's build, in dir, as the Flux
// installation's kustomization with config/notifications as a component builds them: Alerts and
// Receivers accept tidegate's kinds.
func patchedNotificationCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	root, err := os.MkdirTemp("", "tidegate-notification-crds-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	// notification-controller's CRDs, and a copy of config/notifications beside them: kustomize
	// takes a component only from a path relative to the kustomization.
	copyYAML := func(from, to string) ([]string, error) {
		files, err := filepath.Glob(filepath.Join(from, "*.yaml"))
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(to, 0o755); err != nil {
			return nil, err
		}
		var names []string
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(to, filepath.Base(f)), b, 0o644); err != nil {
				return nil, err
			}
			names = append(names, filepath.Base(f))
		}
		return names, nil
	}
	crdFiles, err := copyYAML(dir, root)
	if err != nil {
		return nil, err
	}
	if _, err := copyYAML(filepath.Join("..", "..", "config", "notifications"), filepath.Join(root, "notifications")); err != nil {
		return nil, err
	}
	kustomization := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" +
		strings.Join(crdFiles, ", ") + "]\ncomponents: [notifications]\n"
	if err := os.WriteFile(filepath.Join(root, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		return nil, err
	}
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), root)
	if err != nil {
		return nil, fmt.Errorf("building config/notifications over notification-controller's CRDs: %w", err)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, r := range resources.Resources() {
		if r.GetKind() != "CustomResourceDefinition" {
			continue // config/notifications' RBAC: the fleet's notification-controller runs as the hub's admin
		}
		m, err := r.Map()
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, crd); err != nil {
			return nil, err
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// webhookEvent is what notification-controller's generic provider posts: Flux's event, with the
// metadata of tidegate's group passed on without its prefix.
type webhookEvent struct {
	InvolvedObject struct{ Kind, Namespace, Name string }
	Severity       string            `json:"severity"`
	Reason         string            `json:"reason"`
	Message        string            `json:"message"`
	Metadata       map[string]string `json:"metadata"`
}

// webhook records what notification-controller posts to it.
type webhook struct {
	mu     sync.Mutex
	events []webhookEvent
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var e webhookEvent
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &e); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	w.events = append(w.events, e)
	w.mu.Unlock()
}

// withReason returns the events posted with reason.
func (w *webhook) withReason(reason string) []webhookEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []webhookEvent
	for _, e := range w.events {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func (w *webhook) reasons() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, e := range w.events {
		out = append(out, e.Reason)
	}
	return strings.Join(out, ", ")
}

// A canary that fails its gate rolls back, and a real notification-controller, with an Alert on
// the rollout (config/notifications lets an Alert name a FleetRollout), posts the failure to a
// generic webhook once: one RollingBack, naming the rollout, the wave, the revision and the receipt
// that decided it, however many reconciles the rollback took.
func TestE2ENotificationsOfARollback(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 3, demoPackage("v1"))
	eventsAddr := s.notificationController(t)
	hook := &webhook{}
	server := httptest.NewServer(hook)
	t.Cleanup(server.Close)
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	for _, obj := range []map[string]any{
		{"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Provider",
			"metadata": map[string]any{"name": "webhook", "namespace": s.ns},
			"spec":     map[string]any{"type": "generic", "address": server.URL}},
		{"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Alert",
			"metadata": map[string]any{"name": "web", "namespace": s.ns},
			"spec": map[string]any{"providerRef": map[string]any{"name": "webhook"}, "eventSeverity": "error",
				"eventSources": []any{map[string]any{"kind": "FleetRollout", "name": "web"}}}},
	} {
		if err := s.f.Hub.Create(ctx, &unstructured.Unstructured{Object: obj}); err != nil {
			t.Fatalf("creating the %s: %v", obj["kind"], err)
		}
	}
	startTidegate(t, s, controllers.Options{EventsAddr: eventsAddr})
	s.rollOutFirst(ctx, t, first, func(fr *v1alpha1.FleetRollout) { fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback })
	if got := hook.withReason(controllers.CompletedEventReason); len(got) != 0 {
		t.Errorf("the Alert asks for errors only, and Completed was posted: %+v", got)
	}
	s.breakVersion("v2")
	rev2 := s.commitVersion(t, "v2")
	got := s.waitPhase(ctx, t, "web", v1alpha1.PhaseRolledBack, rev2)
	canary := got.Status.Waves[0]
	var failed *v1alpha1.GateOutcome
	for i := range canary.Gates {
		if canary.Gates[i].Result != v1alpha1.ResultPass {
			failed = &canary.Gates[i]
		}
	}
	if failed == nil {
		t.Fatalf("the canary wave records no failed gate: %s", describe(got))
	}
	eventually(ctx, t, "a RollingBack event posted to the webhook", func() (bool, string) {
		return len(hook.withReason(controllers.RollingBackEventReason)) > 0, "posted: " + hook.reasons()
	})
	// The rollout rests: whatever more reconciles do, the transition was announced once.
	s.reconciledAgain(ctx, t, "web", reconciles(t, s.ns, "web"), 2)
	posted := hook.withReason(controllers.RollingBackEventReason)
	if len(posted) != 1 {
		t.Fatalf("RollingBack posted %d times, want once: %+v", len(posted), posted)
	}
	e := posted[0]
	if e.InvolvedObject.Kind != "FleetRollout" || e.InvolvedObject.Name != "web" || e.InvolvedObject.Namespace != s.ns {
		t.Errorf("the event is about %+v, want FleetRollout %s/web", e.InvolvedObject, s.ns)
	}
	if e.Severity != "error" {
		t.Errorf("severity %q, want error", e.Severity)
	}
	for key, want := range map[string]string{"revision": rev2, "wave": canary.Name, "receipt": failed.Receipt, "gate": failed.Gate} {
		if e.Metadata[key] != want {
			t.Errorf("metadata %s = %q, want %q (%v)", key, e.Metadata[key], want, e.Metadata)
		}
		if key != "gate" && !strings.Contains(e.Message, want) {
			t.Errorf("the message %q does not name the %s %s", e.Message, key, want)
		}
	}
}
