// Package shipped checks the tidegate binaries as they ship, apart from the source tree: they link
// no test code, the CLI links neither the controller nor the sandbox, and `tidegate sandbox`, built
// with -trimpath beside tidegate-sandbox and run away from the checkout, finds the test binaries in
// the cache of `make testbin` and installs the CRDs it embeds; `make image` builds the controller's
// image, and `make release` the CLI for each platform with the sums of every file. It has tests only.
package shipped
