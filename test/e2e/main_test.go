package e2e

import (
	"io"
	"log"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// The Git server logs every request with the standard logger; the Flux controllers' and API
	// servers' logs (printed when a test fails) say what matters.
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}
