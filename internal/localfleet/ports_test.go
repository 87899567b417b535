package localfleet

import (
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Reservations are exclusive: fleets reserving at the same time never get the same port, a port
// reserved is refused to everyone else (another reservation of this process included, as envtest's
// would be) until released, and then it can be had again.
func TestReservedPortsAreNeverHandedOutTwice(t *testing.T) {
	var wg sync.WaitGroup
	sets := make([]*portSet, 8)
	errs := make([]error, len(sets))
	for i := range sets {
		wg.Add(1)
		go func() { defer wg.Done(); sets[i], errs[i] = reservePorts(20) }()
	}
	wg.Wait()
	seen := map[int]bool{}
	for i, s := range sets {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer s.release()
		for _, p := range s.ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}

	dir, err := portDir()
	if err != nil {
		t.Fatal(err)
	}
	port := sets[0].ports[0]
	if f, err := lockPort(dir, port); err != nil || f != nil {
		t.Fatalf("port %d is reserved, yet it was reserved again (%v)", port, err)
	}
	sets[0].release()
	f, err := lockPort(dir, port)
	if err != nil || f == nil {
		t.Fatalf("released, port %d should be free to reserve: %v", port, err)
	}
	f.Close()
}

// A Flux controller whose port was taken before it could listen is started again on other ports:
// the fleet starts, and the controller's first try is kept in a log of its own.
func TestAControllerWhosePortWasTakenStartsAgain(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	reserve = func(n int) (*portSet, error) {
		s, err := reservePorts(n)
		if calls++; err == nil && calls == 1 {
			s.ports[0] = taken.Addr().(*net.TCPAddr).Port // the metrics port, already bound
		}
		return s, err
	}
	defer func() { reserve = reservePorts }()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, err := Start(ctx, Options{NoKustomizeController: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if f.PID("source-controller") == 0 {
		t.Fatal("source-controller does not run")
	}
	if calls != 2 {
		t.Errorf("source-controller got ports %d times, want 2", calls)
	}
	first, err := os.ReadFile(f.logDir() + "/source-controller.log.1")
	if err != nil || !strings.Contains(string(first), "address already in use") {
		t.Errorf("the first try's log should say its port was taken: %v\n%s", err, first)
	}
}

// listensOn tells the ports a process listens on from those it does not.
func TestListensOnTellsAProcesssListeningPorts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	open, gone := l.Addr().(*net.TCPAddr).Port, closed.Addr().(*net.TCPAddr).Port
	if all, known := listensOn(os.Getpid(), []int{open}); !known || !all {
		t.Errorf("this process listens on %d: all %v, known %v", open, all, known)
	}
	if all, _ := listensOn(os.Getpid(), []int{open, gone}); all {
		t.Errorf("this process does not listen on %d", gone)
	}
}
