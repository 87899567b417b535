package collector

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/verdict"
)

// A known-good whose source answers that it no longer serves the artifact (404) is an observation:
// rollbackSucceeds decides on it at once, with nothing unobserved. A fetch that gets no answer (the
// source unreachable) observed nothing, and the gate is inconclusive.
func TestKnownGoodNotServedIsObservedAndUnreachableIsNot(t *testing.T) {
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	w := newWorld(t, 2, 100*time.Millisecond, time.Second, time.Second, clk.Now())
	c := newCollector(t, clk)
	gone := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(gone.Close)
	unreachable := httptest.NewServer(http.NotFoundHandler())
	unreachable.Close()

	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name, url, says string
		unobserved      bool
	}{
		{"not served", gone.URL + "/old.tar.gz", "404", false},
		{"unreachable", unreachable.URL + "/old.tar.gz", "connection refused", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := w.decision(t, clk.Now())
			dec.Rollout.Status.LastKnownGood = &v1alpha1.RevisionStatus{Revision: "main@sha1:old", Digest: digest, Source: "web-old"}
			dec.KnownGood = engine.SourceState{Name: "web-old", Exists: true, Ready: true, Revision: "main@sha1:old", Digest: digest, URL: tc.url}
			out, err := c.Collect(context.Background(), dec, v1alpha1.GateRollbackSucceeds, 1)
			if err != nil {
				t.Fatal(err)
			}
			ev := out.Evidence.(verdict.RollbackSucceedsEvidence)
			if ev.KnownGoodSource == nil || ev.KnownGoodSource.Renders || !strings.Contains(ev.KnownGoodSource.RenderError, tc.says) {
				t.Fatalf("known-good source %+v; want it not rendered, saying %q", ev.KnownGoodSource, tc.says)
			}
			if got := len(ev.Unobserved) > 0; got != tc.unobserved {
				t.Errorf("unobserved %+v; want unobserved: %v", ev.Unobserved, tc.unobserved)
			}
		})
	}
}

// A known-good whose pinned source could not be read (the hub did not answer) is not a known-good
// that is gone: rollbackSucceeds is Inconclusive on it (ErrUnobserved), and decided again once the
// source can be read. A pinned source that is not there (NotFound) is an observation: the way back
// is gone, and the built-in policy fails the gate.
func TestKnownGoodSourceUnreadIsInconclusiveAndGoneFails(t *testing.T) {
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	w := newWorld(t, 2, 100*time.Millisecond, time.Second, time.Second, clk.Now())
	c := newCollector(t, clk)
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	withKnownGood := func(s engine.SourceState) *engine.World {
		dec := w.decision(t, clk.Now())
		dec.Rollout.Status.LastKnownGood = &v1alpha1.RevisionStatus{Revision: "main@sha1:old", Digest: digest, Source: "web-old"}
		dec.KnownGood = s
		return dec
	}

	unread := withKnownGood(engine.SourceState{Name: "web-old", ReadError: "reading pinned source fleet/web-old: etcdserver: request timed out"})
	if _, err := c.Collect(context.Background(), unread, v1alpha1.GateRollbackSucceeds, 1); !errors.Is(err, ErrUnobserved) || !strings.Contains(err.Error(), "request timed out") {
		t.Errorf("a known-good source that could not be read: %v, want ErrUnobserved saying why", err)
	}
	if _, err := c.Collect(context.Background(), unread, v1alpha1.GateRollbackSafe, 0); !errors.Is(err, ErrUnobserved) {
		t.Errorf("rollbackSafe over a known-good source that could not be read: %v, want ErrUnobserved", err)
	}

	out, err := c.Collect(context.Background(), withKnownGood(engine.SourceState{Name: "web-old"}), v1alpha1.GateRollbackSucceeds, 1)
	if err != nil {
		t.Fatalf("a known-good source that is not there is an observation: %v", err)
	}
	ev := out.Evidence.(verdict.RollbackSucceedsEvidence)
	if ev.KnownGoodSource == nil || ev.KnownGoodSource.Exists || len(ev.Unobserved) > 0 {
		t.Fatalf("known-good source %+v, unobserved %+v: want it gone, nothing unobserved", ev.KnownGoodSource, ev.Unobserved)
	}
	d, err := verdict.Evaluate(verdict.DefaultPolicy(), v1alpha1.GateRollbackSucceeds, ev)
	if err != nil {
		t.Fatal(err)
	}
	if d.Pass || d.Inconclusive {
		t.Errorf("the built-in policy over a known-good source that is gone: %+v, want Fail", d)
	}
}
