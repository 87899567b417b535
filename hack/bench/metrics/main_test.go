package main

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A small run on a real Prometheus measures what the collector would read: one request per policy
// query per decision, for the wave and its baseline together, every cluster with a summary and the
// error ratio served read back; and it leaves neither Prometheus's process nor its directory behind.
// (No figure of time is checked: they are the bench's to print.)
func TestRunSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := runIn(ctx, config{Clusters: 3, Baseline: 2, Window: 8 * time.Second, Step: 2 * time.Second, Decisions: 2,
		RPS: 100, ErrorShare: 0.1, PerTarget: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if r.QueriesPerDecision != len(queries) || len(r.Summarising) != 2 {
		t.Errorf("%d requests per decision and %d decisions, want %d and 2", r.QueriesPerDecision, len(r.Summarising), len(queries))
	}
	for _, q := range r.Queries {
		if q.Series != 5 || q.Missing != 0 || q.Points < 5 || q.RequestBytes == 0 || q.AnswerBytes == 0 || q.WireBytes == 0 || len(q.Wall) != 2 {
			t.Errorf("query %s: %+v, want the 5 clusters' series, every wave cluster summarised, the sizes counted", q.Name, q)
		}
	}
	if got := r.Queries[0]; got.Name != "errorRatio" || math.Abs(got.ReadBack-r.ServedErrorRatio) > 0.1*r.ServedErrorRatio {
		t.Errorf("%s read %.4f, served %.4f", got.Name, got.ReadBack, r.ServedErrorRatio)
	}
	if !r.ProcOK || r.PeakRSS == 0 || r.HeadSeries == "?" {
		t.Errorf("Prometheus's process found %v, peak RSS %d, head series %s: want them read", r.ProcOK, r.PeakRSS, r.HeadSeries)
	}
	if _, err := os.Stat(r.Config.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the run's directory %s is still there (%v)", r.Config.Dir, err)
	}
	if pid, found := prometheusPID(filepath.Join(r.Config.Dir, "prometheus", "prometheus.yml")); found {
		t.Errorf("Prometheus (pid %d) still runs after the run", pid)
	}
}
