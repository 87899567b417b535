// Package e2e holds the end-to-end tests: real kube-apiservers, real Flux controllers and a real Git
// server, started by internal/localfleet. Test names start with TestE2E so `make test-e2e` can select them.
package e2e
