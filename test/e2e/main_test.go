package e2e

import (
	"io"
	"log"
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
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
