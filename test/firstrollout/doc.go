// Package firstrollout checks the first steps of a user on a hub of their own: `make deploy`
// (hack/deploy), its refusal without an image the cluster can pull and its install with one, on a
// real kube-apiserver; and docs/first-rollout.md, followed block by block on the local fleet, from
// the install to a release rolled out in two waves and its receipts (TestFirstRolloutFollowsTheDoc,
// whose file states the conventions the document is written in). It has tests only.
package firstrollout
