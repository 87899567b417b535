package localfleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// kubeControllerManagerUser is the hub user kube-controller-manager runs as, told apart from the
// others in the hub's audit log.
const kubeControllerManagerUser = "system:kube-controller-manager"

// startGarbageCollector runs kube-controller-manager (bin) against the hub with only its
// garbage-collector and namespace controllers, so that the hub behaves as a real one when objects
// are deleted: what an object owns is deleted after it (the per-cluster Kustomizations of a deleted
// FleetRollout), and a deleted namespace is emptied and goes. Nothing else of a controller manager
// runs: there are no nodes, pods or service accounts to look after on the hub.
func (f *Fleet) startGarbageCollector(bin string) error {
	_, kc, err := f.AddHubUser(kubeControllerManagerUser, []string{"system:masters"})
	if err != nil {
		return err
	}
	dir := filepath.Join(f.Dir, "hub", "kube-controller-manager")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}
	// Not reserve: a test replaces it to hand the Flux controllers a taken port.
	reserved, err := reservePorts(1)
	if err != nil {
		return err
	}
	f.reserved = append(f.reserved, reserved)
	ports := reserved.ports
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--controllers=garbagecollector,namespace",
		// Each controller acts with the kubeconfig's credentials: the hub has no service account
		// token controller to mint its own.
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", ports[0]),
		"--cert-dir=" + dir,
	}
	name := "kube-controller-manager"
	logPath := filepath.Join(f.logDir(), "hub-"+name+".log")
	f.addLogFile(logPath)
	proc, err := startProcess(name, logPath, nil, bin, args...)
	if err != nil {
		return err
	}
	f.processes = append(f.processes, proc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return proc.waitHTTP200(ctx, "https://"+addr(ports[0])+"/healthz")
}
