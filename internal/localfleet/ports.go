package localfleet

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The Flux controllers take their ports as flags, so a port must be chosen before they bind it, and
// in between another fleet starting at the same time (in this process or another) could choose it
// too. envtest, which starts the API servers and etcds, has the same problem and solves it with a
// reservation directory: a file per port, held with flock(2) by the process that chose it and
// honoured for two minutes (sigs.k8s.io/controller-runtime/pkg/internal/testing/addr). The ports
// localfleet chooses are reserved in that same directory, so no envtest API server or etcd, and no
// other fleet, is handed a port a Flux controller of this fleet is about to bind, or the other way
// round. What such a reservation cannot stop (a process outside the scheme binding the port, an
// outgoing connection taking it as its local port) is caught by the start itself: a controller or
// API server that exits with "address already in use" is started again on new ports.
const (
	portReserveTime = 2 * time.Minute
	portFilePrefix  = "port-"
)

var portDir = sync.OnceValues(func() (string, error) {
	// As controller-runtime computes it: the user's cache directory, else the temporary one.
	for _, base := range []func() (string, error){os.UserCacheDir, func() (string, error) { return os.TempDir(), nil }} {
		b, err := base()
		if err != nil {
			continue
		}
		dir := filepath.Join(b, "kubebuilder-envtest")
		if err := os.MkdirAll(dir, 0o750); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("no directory for port reservations (kubebuilder-envtest in the user's cache or temporary directory)")
})

// portSet is a set of reserved ports; release ends the reservations.
type portSet struct {
	ports []int
	files []*os.File
}

func (s *portSet) release() {
	for _, f := range s.files {
		f.Close()
	}
	s.files = nil
}

// reserve is reservePorts; a test replaces it to hand out a port that is already taken.
var reserve = reservePorts

// reservePorts returns n distinct loopback ports that are free now and reserved against every other
// fleet and envtest API server until release.
func reservePorts(n int) (*portSet, error) {
	dir, err := portDir()
	if err != nil {
		return nil, err
	}
	removeStaleReservations(dir)
	s := &portSet{}
	for tries := 0; len(s.ports) < n; tries++ {
		if tries == 100*n {
			s.release()
			return nil, fmt.Errorf("no free loopback port found after %d tries", tries)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.release()
			return nil, fmt.Errorf("finding a free loopback port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		f, err := lockPort(dir, port)
		if err != nil {
			s.release()
			return nil, err
		}
		if f != nil {
			s.ports = append(s.ports, port)
			s.files = append(s.files, f)
		}
	}
	return s, nil
}

// lockPort takes the reservation of port, returning nil when someone else holds it.
func lockPort(dir string, port int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, portFilePrefix+strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("reserving port %d: %w", port, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("reserving port %d: %w", port, err)
	}
	// A reservation is honoured for portReserveTime from its file's time.
	now := time.Now()
	_ = os.Chtimes(f.Name(), now, now)
	return f, nil
}

// removeStaleReservations removes reservation files older than portReserveTime, as envtest does
// before it reserves.
func removeStaleReservations(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), portFilePrefix) {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > portReserveTime {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// addressInUse reports whether the log at path says a listen failed because its port was taken.
func addressInUse(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), "address already in use")
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
