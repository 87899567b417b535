package e2e

import (
	"io"
	"log"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/tidegate/tidegate/internal/localfleet"
)

func TestMain(m *testing.M) {
	// The Git server logs every request with the standard logger; the Flux controllers' and API
	// servers' logs (printed when a test fails) say what matters.
	log.SetOutput(io.Discard)
	// Every test runs its own manager with a logger of its own, writing to its fleet's directory
	// (startTidegate); the process-wide logger is shared by the tests running in parallel, so it
	// keeps nothing.
	ctrl.SetLogger(logr.Discard())
	code := m.Run()
	stopShared()
	os.Exit(code)
}

// fleetStarts bounds how many fleets start at once. The tests run in parallel (go test -parallel,
// set in the Makefile) and mostly wait, but starting a fleet (a hub and up to five members, each a
// kube-apiserver and an etcd, and the Flux controllers) is CPU-bound for a minute on a loaded
// two-core machine. One at a time made the starts the suite's bottleneck (13 of 39 tests done in
// 19 minutes, on pace for an hour); two at a time, each start has localfleet's eight minutes,
// enough beside the running fleets.
var fleetStarts = make(chan struct{}, 2)

// startFleet starts a local fleet for t, no more than cap(fleetStarts) of them at the same time.
func startFleet(t *testing.T, opts localfleet.Options) *localfleet.Fleet {
	t.Helper()
	fleetStarts <- struct{}{}
	defer func() { <-fleetStarts }()
	began := time.Now()
	f := localfleet.StartForTest(t, opts)
	t.Logf("localfleet: fleet started in %.1fs (hub and %d members, own)", time.Since(began).Seconds(), opts.Members)
	return f
}
