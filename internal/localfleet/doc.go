// Package localfleet starts a real fleet on one machine: a hub kube-apiserver with tidegate's and
// Flux's CRDs and a garbage collector (kube-controller-manager's garbage-collector and namespace
// controllers), member kube-apiservers whose kubeconfig Secrets live on the hub, Flux
// source-controller and kustomize-controller as processes pointed at the hub, and a Git server
// holding repositories that callers commit to. The sandbox runs it, and so do the tests
// (StartForTest).
//
// Everything listens on loopback ports the kernel picks, so two fleets on one machine don't collide,
// and Stop leaves no process, port or temporary directory behind.
package localfleet
