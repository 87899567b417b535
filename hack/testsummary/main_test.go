package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// stream builds `go test -json` input: a line starting "=== " is kept as it is, any other is
// "seconds action package test [elapsed|output]", seconds counted from a fixed start.
func stream(t *testing.T, lines ...string) string {
	t.Helper()
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var b strings.Builder
	for _, l := range lines {
		if strings.HasPrefix(l, "=== ") {
			b.WriteString(l + "\n")
			continue
		}
		f := strings.SplitN(l, " ", 5)
		var secs float64
		fmt.Sscan(f[0], &secs)
		e := event{Time: start.Add(time.Duration(secs * float64(time.Second))), Action: f[1], Package: f[2]}
		if len(f) > 3 && f[3] != "-" {
			e.Test = f[3]
		}
		if len(f) > 4 {
			if e.Action == "output" {
				e.Output = f[4] + "\n"
			} else {
				fmt.Sscan(f[4], &e.Elapsed)
			}
		}
		j, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestSummarise(t *testing.T) {
	in := stream(t,
		"=== phase packages",
		"0 start a -",
		"0.5 run a TestA",
		"1 output a TestA     schedule_test.go:60: schedule: waited 2s for its turn",
		"3 pass a TestA 2.5",
		"3 run a TestB",
		"3.2 run a TestB/sub",
		"3.5 pass a TestB/sub 90",
		"4 skip a TestB 1",
		"4 pass a - 4",
		"=== again under the race detector: ./a",
		"=== phase e2e",
		"100 start e -",
		"100 run e TestE2E",
		"101 output e TestE2E/flux     fleet.go:42: localfleet: fleet started in 74.3s (hub and 5 members)",
		"102 output e TestE2E/kustomize     fleet.go:42: localfleet: fleet started in 12.5s (hub and 2 members)",
		"103 output e -  localfleet: fleet started in 61s (hub only)",
		"104 output e TestE2E     e2e_test.go:9: boom",
		"160 fail e TestE2E 60",
		"170 fail e - 70",
	)
	var out strings.Builder
	ok := summarise(strings.NewReader(in), &out)
	if ok {
		t.Error("summarise reported ok with a failed test")
	}
	want := `=== phase packages
  skip a TestB
ok   a (4.0s)
=== again under the race detector: ./a
=== phase e2e
--- FAIL: e TestE2E (60.0s)
        e2e_test.go:9: boom
FAIL e (70.0s)
     localfleet: fleet started in 61s (hub only)
where the time went:
  phases:
    packages   4s
    e2e        1m10s
  slowest tests:
       60.0s e TestE2E [e2e]
        1.0s a TestB [packages]
        0.5s a TestA [packages]
  fleet starts: 3, 2m27.8s in all, 2 over 60s
       74.3s e TestE2E/flux [e2e]
       61.0s e [e2e]
2 passed, 1 failed, 1 skipped
`
	if got := out.String(); got != want {
		t.Errorf("summary:\n%s\nwant:\n%s", got, want)
	}
}

func TestSummariseNoMarkers(t *testing.T) {
	in := stream(t,
		"0 start a -",
		"1 pass a TestA 0.5",
		"1.5 pass a - 1.5",
	)
	var out strings.Builder
	if !summarise(strings.NewReader(in), &out) {
		t.Error("summarise reported a failure when every test passed")
	}
	want := `ok   a (1.5s)
where the time went:
  phases:
    (none)     1.5s
  slowest tests:
        0.5s a TestA
1 passed, 0 failed, 0 skipped
`
	if got := out.String(); got != want {
		t.Errorf("summary:\n%s\nwant:\n%s", got, want)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"localfleet: fleet started in 74.3s (hub and 5 members)\n":                    74300 * time.Millisecond,
		"    fleet.go:42: localfleet: fleet started in 5s (hub and 5 members)\n":      5 * time.Second,
		"    fleet.go:42: localfleet: fleet started in 1m14.3s (hub and 5 members)\n": 74300 * time.Millisecond,
		"    fleet.go:42: localfleet: fleet started in soon\n":                        0,
		"    fleet.go:42: localfleet: fleet stopped in 3s\n":                          0,
	} {
		got, ok := parseDuration(in, fleetStarted)
		if got != want || ok != (want != 0) {
			t.Errorf("parseDuration(%q, fleetStarted) = %v, %v; want %v", in, got, ok, want)
		}
	}
}

// A package that does not build shows the compiler's messages, which go test -json sends as
// build-output events.
func TestSummariseShowsBuildErrors(t *testing.T) {
	in := `{"ImportPath":"x/b [x/b.test]","Action":"build-output","Output":"# x/b\n"}
{"ImportPath":"x/b [x/b.test]","Action":"build-output","Output":"b_test.go:3:2: undefined: nope\n"}
{"Time":"2026-01-01T00:00:00Z","Action":"fail","Package":"x/b","Elapsed":0,"FailedBuild":"x/b [x/b.test]"}
`
	var out strings.Builder
	if summarise(strings.NewReader(in), &out) {
		t.Error("summarise reported success for a package that did not build")
	}
	if !strings.Contains(out.String(), "b_test.go:3:2: undefined: nope") {
		t.Errorf("the compiler's message is missing:\n%s", out.String())
	}
}

// A package killed by its -timeout never ends the tests it was running: they are named, counted as
// failed, and shown with their output up to the goroutine dump.
func TestSummariseNamesTestsATimeoutKilled(t *testing.T) {
	in := stream(t,
		"0 start e -",
		"1 run e TestDone",
		"2 pass e TestDone 1",
		"3 run e TestSlow",
		"4 run e TestSlow/step",
		"5 run e TestStuck",
		"6 output e TestStuck     stuck_test.go:7: waiting for the canary",
		"1500 output e TestStuck panic: test timed out after 25m0s",
		"1500 output e TestStuck goroutine 1 [running]:",
		"1500 output e TestStuck main.main()",
		"1500 fail e - 1500",
	)
	var out strings.Builder
	if summarise(strings.NewReader(in), &out) {
		t.Error("summarise reported ok for a package that timed out")
	}
	got := out.String()
	for _, want := range []string{
		"--- UNFINISHED: e TestSlow (running for 1497.0s when its package ended)\n",
		"--- UNFINISHED: e TestStuck (running for 1495.0s when its package ended)\n        stuck_test.go:7: waiting for the canary\n    panic: test timed out after 25m0s\n",
		"1 passed, 2 failed, 0 skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "goroutine 1") || strings.Contains(got, "TestSlow/step") {
		t.Errorf("summary shows the goroutine dump or a subtest:\n%s", got)
	}
}
