package e2e

import "fmt"

// demoPackage is a small package at path app/: a namespace, a Deployment the simulator makes healthy
// (or not), and a ConfigMap carrying the version so tests can read from a member what it runs.
func demoPackage(version string) map[string]string {
	return map[string]string{
		"app/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [namespace.yaml, deployment.yaml, configmap.yaml]\n",
		"app/namespace.yaml":     "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n",
		"app/configmap.yaml": fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: web-version
  namespace: demo
data:
  version: %q
`, version),
		"app/deployment.yaml": fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
      annotations: {version: %q}
    spec:
      containers:
      - name: web
        image: ghcr.io/example/web:%s
`, version, version),
	}
}
