package localfleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// MaxStarts is how many fleets start at once on this machine, whichever processes start them:
// starting one (a hub and members, each a kube-apiserver and an etcd, then the Flux controllers)
// is CPU-bound for a minute on a loaded two-core machine, and more at once ran API servers past
// their start timeouts. go test runs two test binaries at once, and several of them start fleets
// (e2e, the sandbox, the scale smoke, the controllers'), so an in-process limit was not enough.
const MaxStarts = 2

// startSlotDir holds one file per slot, each held with flock(2) by the process starting a fleet; the
// kernel lets go of a lock whose process died, so a crashed test leaves no slot taken.
var startSlotDir = func() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "tidegate", "fleet-starts")
	return dir, os.MkdirAll(dir, 0o755)
}

// takeStartSlot waits until one of the MaxStarts slots is free and takes it; release frees it.
func takeStartSlot(ctx context.Context) (release func(), err error) {
	dir, err := startSlotDir()
	if err != nil {
		return nil, fmt.Errorf("fleet start slots: %w", err)
	}
	for {
		for i := range MaxStarts {
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("slot-%d", i)), os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				return nil, fmt.Errorf("fleet start slots: %w", err)
			}
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				return func() { _ = f.Close() }, nil // closing the file releases the lock
			}
			_ = f.Close()
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("fleet start slots: locking %s: %w", f.Name(), err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for one of the %d fleet start slots (%s): %w", MaxStarts, dir, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
