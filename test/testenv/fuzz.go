package testenv

import "flag"

// Fuzzing reports whether the test binary runs a fuzz target (go test -fuzz: its coordinator and
// each of its workers). A TestMain then runs only the target, over no API server: starting one per
// process would cost more than the run. It parses the command line's flags.
func Fuzzing() bool {
	flag.Parse()
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}
