package localfleet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is a child process whose output goes to a log file. It runs in its own process group and
// is killed when the parent dies, so a crashed test leaves nothing running.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{}
	err     error
	// env, bin and args are what it was started with, so it can be started again the same way.
	env  []string
	bin  string
	args []string
	// ports are the ports it was given: metrics, health, and any others.
	ports []int
}

// waitReady waits until the controller answers on its health port (ports[1]) and listens on all
// its ports.
func (p *process) waitReady(ctx context.Context) error {
	if err := p.waitHTTP200(ctx, "http://"+addr(p.ports[1])+"/readyz"); err != nil {
		return err
	}
	return p.waitListening(ctx, p.ports)
}

func startProcess(name, logPath string, env []string, bin string, args ...string) (*process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating log file for %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: f, done: make(chan struct{}), env: env, bin: bin, args: args}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop asks the process group to terminate and kills it after a grace period.
func (p *process) stop() {
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	p.logFile.Close()
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// waitHTTP200 polls url until it answers 200, the process exits, or ctx ends. An https URL is a
// loopback port of a process serving a certificate it made itself (kube-controller-manager), so
// the certificate is not verified.
func (p *process) waitHTTP200(ctx context.Context, url string) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a loopback health check
	}}
	for {
		if ended, err := p.exited(); ended {
			return fmt.Errorf("%s exited before it was ready (%v); see %s", p.name, err, p.logPath)
		}
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s was not ready at %s: %w; see %s", p.name, url, ctx.Err(), p.logPath)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitListening waits until the process listens on every one of ports (127.0.0.1, TCP), it exits,
// or ctx ends. A controller answers its health port before it binds the others (metrics, storage),
// and one that finds such a port taken exits only then. Where there is no /proc it returns at once.
func (p *process) waitListening(ctx context.Context, ports []int) error {
	for {
		if ended, err := p.exited(); ended {
			return fmt.Errorf("%s exited after it was ready (%v); see %s", p.name, err, p.logPath)
		}
		if all, known := listensOn(p.cmd.Process.Pid, ports); all || !known {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not listen on ports %v: %w; see %s", p.name, ports, ctx.Err(), p.logPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// listensOn reports whether process pid holds a listening IPv4 TCP socket on each of ports, and
// whether that could be told at all (not without /proc).
func listensOn(pid int, ports []int) (all, known bool) {
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false, false
	}
	listening := map[string]int{} // socket inode → local port, of the sockets in LISTEN state
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		_, hex, _ := strings.Cut(f[1], ":")
		if port, err := strconv.ParseUint(hex, 16, 16); err == nil {
			listening[f[9]] = int(port)
		}
	}
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return false, true
	}
	held := map[int]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			if port, ok := listening[strings.TrimSuffix(inode, "]")]; ok {
				held[port] = true
			}
		}
	}
	for _, port := range ports {
		if !held[port] {
			return false, true
		}
	}
	return true, true
}

// killLeftovers kills every process but this one whose command line names dir (a fleet's
// directory), and waits up to five seconds for them to be gone. Where there is no /proc it does
// nothing.
func killLeftovers(dir string) {
	if dir == "" {
		return
	}
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), dir) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			pids = append(pids, pid)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); len(pids) > 0 && time.Now().Before(deadline); {
		alive := pids[:0]
		for _, pid := range pids {
			// A killed child not yet waited for is a zombie with an empty command line: gone.
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && len(b) > 0 {
				alive = append(alive, pid)
			}
		}
		pids = alive
		time.Sleep(50 * time.Millisecond)
	}
}
