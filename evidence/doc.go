// Package evidence collects what the confidence gates decide over from a revision's Flux
// artifact: it fetches the artifact and proves its digest, unpacks it in memory, renders it
// with kustomize as kustomize-controller would, and classifies what going back from a candidate
// to the known-good would do to data.
package evidence
