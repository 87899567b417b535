package e2e

import (
	"context"
	"testing"
	"time"
)

// eventually polls cond until it is true or ctx ends; on timeout the test fails with what and the last observation.
func eventually(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s; last seen: %s", what, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
