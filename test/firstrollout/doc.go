// Package firstrollout checks the first steps of a user on a hub of their own: `make deploy`
// (hack/deploy), its refusal without an image the cluster can pull and its install with one, on a
// real kube-apiserver. It has tests only.
package firstrollout
