package localfleet

import (
	"context"
	"os"
	"time"
)

// TB is the part of testing.TB that StartForTest uses. localfleet ships in the tidegate binary (the
// sandbox runs it), and the binary must not link the testing package, so it names the methods
// instead of importing testing; a *testing.T satisfies it.
type TB interface {
	Helper()
	Cleanup(func())
	Failed() bool
	Fatalf(format string, args ...any)
}

// StartForTest starts a fleet for t and stops it when t ends. When t failed, the last lines of every
// API server, etcd and Flux controller log are printed first, so a failure shows what the fleet saw.
func StartForTest(t TB, opts Options) *Fleet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f, err := Start(ctx, opts)
	if f != nil {
		t.Cleanup(func() {
			if t.Failed() {
				f.DumpLogs(os.Stderr, 80)
			}
			f.Stop()
		})
	}
	if err != nil {
		t.Fatalf("starting local fleet: %v", err)
	}
	return f
}
