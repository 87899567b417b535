// Command testsummary reads `go test -json` on stdin and prints what a person needs: each package's
// result, the whole output of every failed test, where the time went (each phase's wall time, the
// slowest tests, the slow local fleet starts), and a closing line "N passed, N failed, N skipped".
// It exits 1 when any test or package failed.
//
// A test still running when its package ends (the binary's -timeout killed it, or it crashed) is
// counted as failed and printed as UNFINISHED, with its output up to the goroutine dump, so that a
// timed-out run names the tests it was waiting on (the whole dump stays in bin/test.json).
//
// A non-JSON line "=== phase NAME" starts a phase; the phase's time runs from the first to the last
// Time of the events after it. Other non-JSON lines go straight through.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

const (
	phaseMarker  = "=== phase "
	fleetStarted = "localfleet: fleet started in "
	// waitedMarker starts the line a test logs for the time it spent waiting to run (test/e2e's
	// schedule: for its turn, or for a fleet slot); the slowest tests are ranked by their time less
	// that wait.
	waitedMarker = "schedule: waited "
	slowestShown = 10
	slowFleet    = time.Minute
)

type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// phase is a stretch of the input after one "=== phase" marker.
type phase struct {
	name        string
	first, last time.Time
}

// testTime is one top-level test's result.
type testTime struct {
	pkg, test, phase string
	elapsed          float64
}

// fleetStart is one "localfleet: fleet started in" line.
type fleetStart struct {
	pkg, test, phase string
	took             time.Duration
}

func main() {
	if !summarise(os.Stdin, os.Stdout) {
		os.Exit(1)
	}
}

// summarise reads `go test -json` from r, writes the summary to w and reports whether every test and
// package passed.
func summarise(r io.Reader, w io.Writer) (ok bool) {
	var passed, failed, skipped int
	pkgFailed := false
	outputs := map[string][]string{}     // package/test → buffered output
	waited := map[string]time.Duration{} // package/test → the time it logged waiting to run
	running := map[string]event{}        // package/test → its run event, until it ends
	var phases []*phase
	var tests []testTime
	var fleets []fleetStart
	in := bufio.NewScanner(r)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		line := in.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			if name, found := strings.CutPrefix(string(line), phaseMarker); found {
				phases = append(phases, &phase{name: strings.TrimSpace(name)})
			}
			// Build errors and other non-JSON lines go straight through.
			fmt.Fprintln(w, string(line))
			continue
		}
		if !e.Time.IsZero() {
			if len(phases) == 0 {
				phases = append(phases, &phase{name: "(none)"})
			}
			p := phases[len(phases)-1]
			if p.first.IsZero() {
				p.first = e.Time
			}
			p.last = e.Time
		}
		phaseName := ""
		if len(phases) > 0 {
			phaseName = phases[len(phases)-1].name
		}
		key := e.Package + "/" + e.Test
		switch e.Action {
		case "build-output":
			// The compiler's messages of a package that did not build (go test -json sends them as
			// events since Go 1.24).
			fmt.Fprint(w, e.Output)
		case "run":
			running[key] = e
		case "output":
			outputs[key] = append(outputs[key], e.Output)
			if took, ok := parseDuration(e.Output, fleetStarted); ok {
				fleets = append(fleets, fleetStart{e.Package, e.Test, phaseName, took})
			}
			if d, ok := parseDuration(e.Output, waitedMarker); ok {
				waited[key] += d
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				fmt.Fprintf(w, "%-4s %s (%.1fs)\n", map[string]string{"pass": "ok", "fail": "FAIL", "skip": "ok"}[e.Action], e.Package, e.Elapsed)
				if e.Action == "fail" {
					pkgFailed = true
					printOutput(w, outputs[key])
				}
				delete(outputs, key)
				for _, u := range unfinished(running, e.Package) {
					failed++
					k := u.Package + "/" + u.Test
					fmt.Fprintf(w, "--- UNFINISHED: %s %s (running for %.1fs when its package ended)\n", u.Package, u.Test, e.Time.Sub(u.Time).Seconds())
					printOutput(w, beforeDump(outputs[k]))
				}
				continue
			}
			delete(running, key)
			if !strings.Contains(e.Test, "/") {
				tests = append(tests, testTime{e.Package, e.Test, phaseName, e.Elapsed - waited[key].Seconds()})
			}
			delete(waited, key)
			switch e.Action {
			case "pass":
				passed++
			case "skip":
				skipped++
				fmt.Fprintf(w, "  skip %s %s\n", e.Package, e.Test)
			case "fail":
				failed++
				fmt.Fprintf(w, "--- FAIL: %s %s (%.1fs)\n", e.Package, e.Test, e.Elapsed)
				printOutput(w, outputs[key])
			}
			delete(outputs, key)
		}
	}
	readOK := true
	if err := in.Err(); err != nil {
		fmt.Fprintf(w, "testsummary: reading stdin: %v\n", err)
		readOK = false
	}
	printTimes(w, phases, tests, fleets)
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	return readOK && failed == 0 && !pkgFailed
}

// unfinished takes out of running the top-level tests of pkg that never ended, in the order they
// started, and forgets their subtests.
func unfinished(running map[string]event, pkg string) []event {
	var top []event
	for k, e := range running {
		if e.Package != pkg {
			continue
		}
		delete(running, k)
		if !strings.Contains(e.Test, "/") {
			top = append(top, e)
		}
	}
	sort.Slice(top, func(i, j int) bool { return top[i].Time.Before(top[j].Time) })
	return top
}

// beforeDump is a test's output up to the first goroutine of a panic's stack dump.
func beforeDump(lines []string) []string {
	for i, l := range lines {
		if strings.HasPrefix(l, "goroutine ") {
			return lines[:i]
		}
	}
	return lines
}

// parseDuration finds "<marker>74.3s ..." in one line of test output, such as "localfleet: fleet
// started in 74.3s" or "schedule: waited 12.0s for its turn".
func parseDuration(out, marker string) (time.Duration, bool) {
	_, rest, ok := strings.Cut(out, marker)
	if !ok {
		return 0, false
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return 0, false
	}
	d, err := time.ParseDuration(fields[0])
	if err != nil {
		return 0, false
	}
	return d, true
}

// printTimes writes where the time went: each phase's wall time, the slowest top-level tests (by
// their time running: less what they logged waiting to run) and
// every local fleet start over slowFleet.
func printTimes(w io.Writer, phases []*phase, tests []testTime, fleets []fleetStart) {
	if len(phases) == 0 && len(tests) == 0 && len(fleets) == 0 {
		return
	}
	fmt.Fprintln(w, "where the time went:")
	if len(phases) > 0 {
		fmt.Fprintln(w, "  phases:")
		for _, p := range phases {
			fmt.Fprintf(w, "    %-10s %s\n", p.name, round(p.last.Sub(p.first)))
		}
	}
	if len(tests) > 0 {
		sort.SliceStable(tests, func(i, j int) bool { return tests[i].elapsed > tests[j].elapsed })
		fmt.Fprintln(w, "  slowest tests:")
		for _, t := range tests[:min(len(tests), slowestShown)] {
			fmt.Fprintf(w, "    %7.1fs %s %s%s\n", t.elapsed, t.pkg, t.test, inPhase(t.phase, len(phases)))
		}
	}
	if len(fleets) > 0 {
		var total time.Duration
		var slow []fleetStart
		for _, f := range fleets {
			total += f.took
			if f.took > slowFleet {
				slow = append(slow, f)
			}
		}
		fmt.Fprintf(w, "  fleet starts: %d, %s in all, %d over %.0fs\n", len(fleets), round(total), len(slow), slowFleet.Seconds())
		for _, f := range slow {
			fmt.Fprintf(w, "    %7.1fs %s%s\n", f.took.Seconds(), strings.TrimSpace(f.pkg+" "+f.test), inPhase(f.phase, len(phases)))
		}
	}
}

// inPhase names a test's phase when there is more than one.
func inPhase(name string, phases int) string {
	if phases < 2 || name == "" {
		return ""
	}
	return " [" + name + "]"
}

// round rounds d to a tenth of a second.
func round(d time.Duration) time.Duration {
	return d.Round(100 * time.Millisecond)
}

func printOutput(w io.Writer, lines []string) {
	for _, l := range lines {
		if strings.HasPrefix(l, "=== ") {
			continue
		}
		fmt.Fprint(w, "    "+l)
	}
}
