package collector

import (
	"context"
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
