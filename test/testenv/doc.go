// Package testenv is what the test suites share around a real API server: a TestMain that runs a
// package's tests against envtest, the root of the repository for the tests that read its files,
// and a buffer for what runs in the background to write while a test reads it. It imports
// "testing", so no shipped package may import it; internal/testbin, which finds the test
// binaries, is the part the tidegate binary ships.
package testenv
