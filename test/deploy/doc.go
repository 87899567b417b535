// Package deploy checks the deployment manifests in config/default, as `kubectl apply -k
// config/default` installs them, against a real kube-apiserver: they apply, the controller's RBAC
// allows exactly what the controllers do, the controller's pods meet the "restricted" Pod Security
// Standard, and the manager binary runs with them under its own ServiceAccount. It has tests only.
package deploy
