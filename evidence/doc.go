// Package evidence collects what the confidence gates decide over from a revision's Flux
// artifact: it fetches the artifact and proves its digest, unpacks it in memory, renders it
// with kustomize as kustomize-controller would, and classifies what going back from a candidate
// to the known-good would do to data. MemberDeadline shares the time of a pass over many members
// (a preflight, an availability sample) among them, so that a slow member uses up its own share only.
package evidence
