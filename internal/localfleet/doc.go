// Package localfleet starts a real fleet on one machine: a hub kube-apiserver with tidegate's and
// Flux's CRDs and a garbage collector (kube-controller-manager's garbage-collector and namespace
// controllers), member kube-apiservers whose kubeconfig Secrets live on the hub, Flux
// source-controller and kustomize-controller as processes pointed at the hub, and a Git server
// holding repositories that callers commit to. The sandbox runs it, and so do the tests
// (StartForTest).
//
// Everything listens on loopback ports the kernel picks, reserved against every other fleet and
// envtest API server on the machine until they are bound (ports.go), so fleets started at the same
// time, in one process or several, don't collide; and Stop leaves no process, port or temporary
// directory behind. Options.Front puts something chosen in front of API servers: the tests' fault
// proxies (test/faultproxy), which this package does not link, since the sandbox ships it.
package localfleet
