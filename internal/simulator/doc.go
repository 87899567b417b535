// Package simulator plays kubelet and kube-controller-manager for node-less member clusters, moving
// Deployment, StatefulSet, DaemonSet and Job status the way a healthy (or a deliberately broken) cluster
// would.
package simulator
