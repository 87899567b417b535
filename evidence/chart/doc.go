// Package chart renders a Helm chart for a Flux HelmRelease as helm-controller renders it when it
// installs or upgrades the release: the chart archive source-controller serves (a .tgz), the values
// composed as helm-controller composes them, Helm's own install action (the Helm v4 SDK, at the
// version helm-controller v1.6.4 is built with) with the release name and namespace helm-controller
// gives the release, and helm-controller's post-renderers. What it returns is what the gates judge
// of a chart: the objects the release applies, the CRDs of its crds/ directories, which
// helm-controller applies apart from the release, and its hooks.
//
// The Helm SDK is large; only this package imports it, so that what does not render charts does
// not link it.
package chart
