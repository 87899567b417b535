// Command testsummary reads `go test -json` on stdin and prints what a person needs: each package's
// result, the whole output of every failed test, and a closing line "N passed, N failed, N skipped".
// It exits 1 when any test or package failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	var passed, failed, skipped int
	pkgFailed := false
	outputs := map[string][]string{} // package/test → buffered output
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		line := in.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Build errors and other non-JSON lines go straight through.
			fmt.Println(string(line))
			continue
		}
		key := e.Package + "/" + e.Test
		switch e.Action {
		case "output":
			outputs[key] = append(outputs[key], e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				fmt.Printf("%-4s %s (%.1fs)\n", map[string]string{"pass": "ok", "fail": "FAIL", "skip": "ok"}[e.Action], e.Package, e.Elapsed)
				if e.Action == "fail" {
					pkgFailed = true
					printOutput(outputs[key])
				}
				delete(outputs, key)
				continue
			}
			switch e.Action {
			case "pass":
				passed++
			case "skip":
				skipped++
				fmt.Printf("  skip %s %s\n", e.Package, e.Test)
			case "fail":
				failed++
				fmt.Printf("--- FAIL: %s %s (%.1fs)\n", e.Package, e.Test, e.Elapsed)
				printOutput(outputs[key])
			}
			delete(outputs, key)
		}
	}
	fmt.Printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || pkgFailed {
		os.Exit(1)
	}
}

func printOutput(lines []string) {
	for _, l := range lines {
		if strings.HasPrefix(l, "=== ") {
			continue
		}
		fmt.Print("    " + l)
	}
}
