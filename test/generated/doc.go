// Package generated checks that the files controller-gen generates (CRDs, RBAC, deepcopy code) are
// up to date with the API types and markers they are generated from. It has tests only.
package generated
