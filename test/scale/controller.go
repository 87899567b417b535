package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/tidegate/tidegate/controllers"
)

// controller is the tidegate controller under measurement.
type controller interface {
	// start starts it and returns once its informers synced (it is ready to decide).
	start(ctx context.Context) error
	// kill stops it at once, as a crash would.
	kill()
	// metricsURL is its Prometheus endpoint.
	metricsURL() string
	// usage is what the process used so far, over every start; ok is false in-process.
	usage() (u Usage, ok bool)
}

// Usage is the controller process's CPU and memory.
type Usage struct {
	// CPUSeconds is user plus system time, summed over every start.
	CPUSeconds float64
	// PeakRSS is the largest resident set of any start (VmHWM), in bytes.
	PeakRSS int64
}

// processController runs bin/tidegate-controller as a child process with a kubeconfig of its own:
// the production binary with its production flags, so CPU and memory are its alone.
type processController struct {
	bin, kubeconfig string
	log             io.Writer
	args            []string

	metrics, health string
	cmd             *exec.Cmd
	done            chan struct{}
	past            Usage
}

func (p *processController) metricsURL() string { return "http://" + p.metrics + "/metrics" }

func (p *processController) start(ctx context.Context) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	p.metrics, p.health = "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	// One replica, and no Lease renewals among the hub requests the bench counts.
	args := append([]string{"--metrics-addr=" + p.metrics, "--health-addr=" + p.health,
		"--log-encoding=json", "--enable-leader-election=false"}, p.args...)
	cmd := exec.Command(p.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+p.kubeconfig)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.bin, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.done) }()
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (see its log)", p.bin)
		case <-ctx.Done():
			return fmt.Errorf("%s was not ready: %w", p.bin, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := client.Get("http://" + p.health + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
}

func (p *processController) kill() {
	if p.cmd == nil {
		return
	}
	if u, ok := procUsage(p.cmd.Process.Pid); ok {
		p.past.CPUSeconds += u.CPUSeconds
		p.past.PeakRSS = max(p.past.PeakRSS, u.PeakRSS)
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	p.cmd = nil
}

func (p *processController) usage() (Usage, bool) {
	u := p.past
	if p.cmd != nil {
		if now, ok := procUsage(p.cmd.Process.Pid); ok {
			u.CPUSeconds += now.CPUSeconds
			u.PeakRSS = max(u.PeakRSS, now.PeakRSS)
		}
	}
	return u, true
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on Linux for every architecture
// Go runs on.
const clockTicks = 100

// procUsage reads a process's CPU time and peak resident set from /proc.
func procUsage(pid int) (Usage, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, false
	}
	// Fields after the command, which is in parentheses and may hold spaces: state is field 3,
	// utime and stime fields 14 and 15.
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat)[i+1:])
	if len(f) < 13 {
		return Usage{}, false
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	u := Usage{CPUSeconds: (utime + stime) / clockTicks}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, true
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			u.PeakRSS = kb * 1024
		}
	}
	return u, true
}

// inProcessController runs the controllers in this process, wired as the binary wires them
// (controllers.ManagerOptions and controllers.Setup), under the controller user's REST config. The
// smoke test uses it: it needs counts, not CPU.
type inProcessController struct {
	cfg    *rest.Config
	logger logr.Logger

	addr   string
	cancel context.CancelFunc
	done   chan error
}

func newInProcessController(cfg *rest.Config, log io.Writer) *inProcessController {
	logger := zap.New(zap.UseDevMode(true), zap.WriteTo(log))
	ctrl.SetLogger(logger)
	return &inProcessController{cfg: cfg, logger: logger}
}

func (c *inProcessController) metricsURL() string { return "http://" + c.addr + "/metrics" }

func (c *inProcessController) usage() (Usage, bool) { return Usage{}, false }

func (c *inProcessController) start(ctx context.Context) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	c.addr = "127.0.0.1:" + strconv.Itoa(ports[0])
	mgr, err := ctrl.NewManager(c.cfg, controllers.ManagerOptions(controllers.ManagerConfig{Logger: c.logger, MetricsAddr: c.addr}))
	if err != nil {
		return err
	}
	if err := controllers.Setup(mgr, c.cfg, controllers.Options{SkipNameValidation: true}); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan error, 1)
	go func() { c.done <- mgr.Start(runCtx) }()
	syncCtx, cancelSync := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelSync()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		c.kill()
		return errors.New("the in-process controller's informers did not sync")
	}
	return nil
}

func (c *inProcessController) kill() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
	c.cancel = nil
}

// freePorts returns n distinct loopback ports the kernel considers free.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
