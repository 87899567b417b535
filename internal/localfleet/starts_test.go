package localfleet

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// No more than MaxStarts slots are held at once, by this process or another (flock locks belong to
// open files, so two in one process exclude each other as two processes would); a freed slot is
// taken by the next one waiting.
func TestStartSlotsBoundStarts(t *testing.T) {
	dir := t.TempDir()
	was := startSlotDir
	startSlotDir = func() (string, error) { return dir, os.MkdirAll(dir, 0o755) }
	t.Cleanup(func() { startSlotDir = was })

	var held []func()
	for range MaxStarts {
		release, err := takeStartSlot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := takeStartSlot(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a slot beyond the %d held was taken, or failed otherwise: %v", MaxStarts, err)
	}
	got := make(chan error, 1)
	go func() {
		release, err := takeStartSlot(context.Background())
		if err == nil {
			release()
		}
		got <- err
	}()
	held[0]()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a freed slot was not taken")
	}
	for _, release := range held[1:] {
		release()
	}
}
