// Package docs checks the README and the documents under docs/ as a reader meets them: every
// relative link resolves to a file (and a heading, when it names one), docs/README.md lists every
// document, and the README's FleetRollout is one the CRD accepts. It has tests only.
package docs
