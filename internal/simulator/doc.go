// Package simulator plays kubelet, kube-controller-manager and a storage provisioner for node-less
// member clusters: it moves Deployment, StatefulSet, DaemonSet, Job, CronJob and HorizontalPodAutoscaler
// status the way a healthy (or a deliberately broken) cluster would, creates a StatefulSet's claims
// and binds every claim to a volume it provisions.
package simulator
