package localfleet

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/testbin"
)

// fleetProcesses lists the processes whose command line names dir.
func fleetProcesses(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), dir) && !strings.Contains(string(b), "/bin/sh") {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// A fleet stops cleanly: Stop leaves no process and no directory behind.
func TestStartAndStopLeaveNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, err := Start(ctx, Options{Members: 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := f.Dir
	if n := len(fleetProcesses(t, dir)); n < 5 {
		t.Fatalf("want hub and member API servers, etcds and source-controller running under %s, found %d", dir, n)
	}
	// What a failed test prints: the tail of every API server, etcd and Flux controller log.
	var logs bytes.Buffer
	f.DumpLogs(&logs, 5)
	for _, name := range []string{"hub-kube-apiserver.log", "hub-etcd.log", "hub-kube-controller-manager.log", "member-1-kube-apiserver.log", "source-controller.log", "kustomize-controller.log"} {
		if !strings.Contains(logs.String(), "===== "+name) {
			t.Errorf("DumpLogs does not show %s:\n%s", name, logs.String())
		}
	}
	f.Stop()
	if left := fleetProcesses(t, dir); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("fleet directory %s left after Stop", dir)
	}
}

// A test binary that dies without cleaning up (a -timeout panic, a kill) leaves nothing behind either:
// the reaper kills the fleet's processes and removes its directory.
func TestFleetIsReapedWhenTheTestProcessDies(t *testing.T) {
	if os.Getenv("LOCALFLEET_DIE") != "" {
		f, err := Start(context.Background(), Options{Members: 1, NoFlux: true})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Println("dir", f.Dir)
		os.Exit(1) // no Stop, no cleanup
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFleetIsReapedWhenTheTestProcessDies$")
	cmd.Env = append(os.Environ(), "LOCALFLEET_DIE=1")
	out, _ := cmd.Output()
	dir := ""
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "dir "); ok {
			dir = d
		}
	}
	if dir == "" {
		t.Fatalf("the child did not start a fleet: %s", out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := fleetProcesses(t, dir)
		_, statErr := os.Stat(dir)
		if len(left) == 0 && os.IsNotExist(statErr) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after the test process died: processes %v, directory removed: %v", left, os.IsNotExist(statErr))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Two fleets started at the same time both come up, with Flux, on ports of their own: no API
// server, etcd or Flux controller of one is handed a port of the other.
func TestTwoFleetsStartAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	fleets := make([]*Fleet, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range fleets {
		wg.Add(1)
		go func() { defer wg.Done(); fleets[i], errs[i] = Start(ctx, Options{Members: 1}) }()
	}
	wg.Wait()
	for i, f := range fleets {
		if f != nil {
			defer f.Stop()
		}
		if errs[i] != nil {
			if f != nil {
				f.DumpLogs(os.Stderr, 40)
			}
			t.Fatalf("fleet %d: %v", i, errs[i])
		}
	}
	owner := map[string]int{}
	for i, f := range fleets {
		// The start timeout in force is testbin's, not envtest's default of 20 s (envtest copies
		// its own over each process's).
		for _, e := range append([]*envtest.Environment{f.hub}, f.Members[0].env) {
			if got := e.ControlPlane.APIServer.StartTimeout; got != testbin.ControlPlaneStartTimeout {
				t.Errorf("fleet %d: kube-apiserver start timeout %s, want %s", i, got, testbin.ControlPlaneStartTimeout)
			}
			if got := e.ControlPlane.Etcd.StartTimeout; got != testbin.ControlPlaneStartTimeout {
				t.Errorf("fleet %d: etcd start timeout %s, want %s", i, got, testbin.ControlPlaneStartTimeout)
			}
		}
		for _, port := range fleetPorts(t, f) {
			if j, ok := owner[port]; ok && j != i {
				t.Errorf("port %s is used by both fleets", port)
			}
			owner[port] = i
		}
		for _, name := range []string{"source-controller", "kustomize-controller"} {
			pid := f.PID(name)
			if pid == 0 {
				t.Errorf("fleet %d: %s does not run", i, name)
				continue
			}
			// Each Flux controller has a TMPDIR of its own in its fleet's directory: kustomize-controller
			// empties its TMPDIR of kustomization-* directories when it starts, which in a shared /tmp
			// deleted the builds in flight of the other fleets.
			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				t.Fatal(err)
			}
			tmp := ""
			for _, kv := range strings.Split(string(environ), "\x00") {
				if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok {
					tmp = v
				}
			}
			if !strings.HasPrefix(tmp, f.Dir+string(os.PathSeparator)) {
				t.Errorf("fleet %d: %s runs with TMPDIR=%q, want a directory of its own in %s", i, name, tmp, f.Dir)
			}
		}
		var cms corev1.ConfigMapList
		if err := f.Members[0].Client.List(ctx, &cms); err != nil {
			t.Errorf("fleet %d: member: %v", i, err)
		}
	}
}

// fleetPorts lists the ports of every API server, etcd and Flux controller of f.
func fleetPorts(t *testing.T, f *Fleet) []string {
	t.Helper()
	envs := []*envtest.Environment{f.hub}
	for _, m := range f.Members {
		envs = append(envs, m.env)
	}
	var ports []string
	for _, e := range envs {
		ports = append(ports, e.ControlPlane.APIServer.SecureServing.Port, e.ControlPlane.Etcd.URL.Port())
	}
	for _, s := range f.reserved {
		for _, p := range s.ports {
			ports = append(ports, strconv.Itoa(p))
		}
	}
	return ports
}

// The hub deletes as a real hub does: an object whose owner is deleted is garbage-collected, and a
// deleted namespace is emptied and goes. Without kube-controller-manager's garbage-collector and
// namespace controllers the dependent would outlive its owner and the namespace would stay
// Terminating.
func TestHubCollectsGarbage(t *testing.T) {
	f := StartForTest(t, Options{NoFlux: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "gc"
	if err := f.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}
	if err := f.Hub.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
	if err := f.Hub.Create(ctx, dependent); err != nil {
		t.Fatal(err)
	}
	if err := f.Hub.Delete(ctx, owner); err != nil {
		t.Fatal(err)
	}
	gone := func(what string, obj client.Object) {
		t.Helper()
		for {
			err := f.Hub.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			if apierrors.IsNotFound(err) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s is still there (%v)", what, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	gone("the ConfigMap whose owner was deleted", dependent)

	left := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "left"}}
	if err := f.Hub.Create(ctx, left); err != nil {
		t.Fatal(err)
	}
	if err := f.Hub.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	gone("the deleted namespace", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	gone("a ConfigMap of the deleted namespace", left)
}

// A fleet asked for notification-controller runs it on the hub with its CRDs, and its events
// endpoint, which tidegate's --events-addr names, takes an event as Flux's controllers post them.
func TestNotificationControllerTakesEvents(t *testing.T) {
	f := StartForTest(t, Options{NoFlux: true, NotificationController: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := f.Hub.Get(ctx, client.ObjectKey{Name: "alerts.notification.toolkit.fluxcd.io"}, &crd); err != nil {
		t.Fatalf("the Alert CRD is not installed: %v", err)
	}
	if !strings.HasPrefix(f.EventsAddr, "http://127.0.0.1:") {
		t.Fatalf("EventsAddr = %q", f.EventsAddr)
	}
	event := `{"involvedObject":{"kind":"ConfigMap","namespace":"default","name":"x","apiVersion":"v1"},` +
		`"severity":"info","timestamp":"2026-12-07T00:00:00Z","message":"m","reason":"R","reportingController":"test"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.EventsAddr, strings.NewReader(event))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("posting an event: %s, want 202 Accepted", resp.Status)
	}
	if err := f.StartNotificationController(ctx, nil); err == nil {
		t.Error("a second notification-controller started on the same fleet")
	}
}
