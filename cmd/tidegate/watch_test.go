package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/test/testenv"
)

// watching is a run of get --watch in the background.
type watching struct {
	stdout, stderr testenv.LockedBuffer
	cancel         context.CancelFunc
	code           chan int
}

func startWatch(ctx context.Context, args ...string) *watching {
	ctx, cancel := context.WithCancel(ctx)
	w := &watching{cancel: cancel, code: make(chan int, 1)}
	e := &cliEnv{now: func() time.Time { return fixedNow }, pollInterval: 50 * time.Millisecond}
	go func() {
		w.code <- runContext(ctx, e, append([]string{"--kubeconfig", kubeconfig}, args...), strings.NewReader(""), &w.stdout, &w.stderr)
	}()
	return w
}

// waitFor waits until stdout has n lines or more, and returns them.
func (w *watching) waitFor(t *testing.T, n int) []string {
	t.Helper()
	return w.waitUntil(t, fmt.Sprintf("%d lines", n), func(lines []string) bool { return len(lines) >= n })
}

// waitForLine waits until a line of stdout starts with prefix and contains each of more, and
// returns it.
func (w *watching) waitForLine(t *testing.T, prefix string, more ...string) string {
	t.Helper()
	var found string
	w.waitUntil(t, fmt.Sprintf("a line %q with %q", prefix, more), func(lines []string) bool {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) && !slices.ContainsFunc(more, func(m string) bool { return !strings.Contains(l, m) }) {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

func (w *watching) waitUntil(t *testing.T, what string, done func(lines []string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var lines []string
		if out := w.stdout.String(); out != "" {
			lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		}
		if done(lines) {
			return lines
		}
		select {
		case code := <-w.code:
			t.Fatalf("the watch ended (exit %d) before printing %s:\n%s%s", code, what, w.stdout.String(), w.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30s:\n%s%s", what, w.stdout.String(), w.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop interrupts the watch and returns its exit code.
func (w *watching) stop(t *testing.T) int {
	t.Helper()
	w.cancel()
	select {
	case code := <-w.code:
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("the watch did not end 30s after it was interrupted")
		return -1
	}
}

// setPhase writes a rollout's status.phase, as the controller would.
func setPhase(ctx context.Context, t *testing.T, name, phase string) {
	t.Helper()
	fr := get(ctx, t, name)
	patch := client.MergeFrom(fr.DeepCopy())
	fr.Status.Phase = phase
	if err := k8s.Status().Patch(ctx, fr, patch); err != nil {
		t.Fatal(err)
	}
}

// get -w prints the table, then a row in its columns each time a rollout changes, until
// interrupted (exit 0); a rollout created during the watch gets its row too.
func TestWatchTable(t *testing.T) {
	ctx := hub(t)
	label := func(fr *v1alpha1.FleetRollout) { fr.Labels = map[string]string{"watch": "table"} }
	newRollout(ctx, t, "watch-a", label)
	w := startWatch(ctx, "-n", writesNS, "get", "rollouts", "-l", "watch=table", "-w")
	lines := w.waitFor(t, 2)
	if !strings.HasPrefix(lines[0], "NAME ") || !strings.HasPrefix(lines[1], "watch-a ") || !strings.Contains(lines[1], " Progressing ") {
		t.Fatalf("the table before any change:\n%s", w.stdout.String())
	}

	setPhase(ctx, t, "watch-a", v1alpha1.PhaseHeld)
	lines = w.waitFor(t, 3)
	if !strings.HasPrefix(lines[2], "watch-a ") || !strings.Contains(lines[2], " Held ") {
		t.Errorf("the row of the change: %q", lines[2])
	}
	// The row keeps the table's columns: PHASE starts where it does in the header.
	if got, want := strings.Index(lines[2], "Held"), strings.Index(lines[0], "PHASE"); got != want {
		t.Errorf("PHASE at column %d of the new row, %d of the header:\n%s", got, want, w.stdout.String())
	}
	// A new rollout is created, then its status written: a row for each.
	newRollout(ctx, t, "watch-b", label)
	w.waitForLine(t, "watch-b ", " Progressing ")
	// A rollout that does not match -l is not shown.
	newRollout(ctx, t, "watch-other", nil)
	setPhase(ctx, t, "watch-a", v1alpha1.PhaseCompleted)
	w.waitForLine(t, "watch-a ", " Completed ")
	if code := w.stop(t); code != exitOK {
		t.Errorf("exit %d after the interrupt, want 0; stderr %q", code, w.stderr.String())
	}
	if strings.Contains(w.stdout.String(), "watch-other") {
		t.Errorf("watch-other, which -l leaves out, was printed:\n%s", w.stdout.String())
	}
}

// get -w -o json prints one JSON object per line: each object listed, then each change; a watch of
// one NAME follows that one only.
func TestWatchJSON(t *testing.T) {
	ctx := hub(t)
	newRollout(ctx, t, "watch-json", nil)
	newRollout(ctx, t, "watch-json-other", nil)
	w := startWatch(ctx, "-n", writesNS, "get", "rollouts", "watch-json", "-w", "-o", "json")
	w.waitFor(t, 1)
	setPhase(ctx, t, "watch-json-other", v1alpha1.PhaseHeld)
	setPhase(ctx, t, "watch-json", v1alpha1.PhaseRollingBack)
	lines := w.waitFor(t, 2)
	if code := w.stop(t); code != exitOK {
		t.Errorf("exit %d after the interrupt, want 0; stderr %q", code, w.stderr.String())
	}
	var phases []string
	for _, l := range lines {
		var r rolloutRow
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", l, err)
		}
		if r.Name != "watch-json" {
			t.Errorf("the watch of watch-json printed %s", r.Name)
		}
		phases = append(phases, r.Phase)
	}
	if len(phases) != 2 || phases[0] != v1alpha1.PhaseProgressing || phases[1] != v1alpha1.PhaseRollingBack {
		t.Errorf("phases %q, want Progressing then RollingBack", phases)
	}
}

// A watch of a kind the user may not list is an API error, as the list is.
func TestWatchForbidden(t *testing.T) {
	r := tidegate(hub(t), "--context", "nobody", "get", "clusters", "-w")
	if r.code != exitUsage || !strings.Contains(r.stderr, "forbidden") {
		t.Errorf("get clusters -w as a user who may list nothing: exit %d, stderr %q", r.code, r.stderr)
	}
}
