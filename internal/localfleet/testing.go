package localfleet

import (
	"context"
	"os"
	"time"
)

// TB is the part of testing.TB that StartForTest uses. localfleet ships in the tidegate-sandbox
// binary (the sandbox runs it), and the binary must not link the testing package, so it names the
// methods instead of importing testing; a *testing.T satisfies it.
type TB interface {
	Helper()
	Cleanup(func())
	Failed() bool
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// StartForTest starts a fleet for t, once fewer than MaxStarts fleets are starting on the machine,
// and stops it when t ends. The start has eight minutes from then; waiting for the slot has twenty.
// When t failed, the last lines of every API server, etcd and Flux controller log are printed
// first, so a failure shows what the fleet saw.
func StartForTest(t TB, opts Options) *Fleet {
	t.Helper()
	wait, cancelWait := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancelWait()
	release, err := takeStartSlot(wait)
	if err != nil {
		t.Fatalf("starting local fleet: %v", err)
	}
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	began := time.Now()
	f, err := start(ctx, opts)
	if err == nil {
		t.Logf("localfleet: fleet started in %.1fs (hub and %d members)", time.Since(began).Seconds(), opts.Members)
	}
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
