// Package machine describes the machine a bench runs on, for the heading of its tables: figures
// from a shared 2-core machine read differently from those of an idle one.
package machine

import (
	"fmt"
	"os"
	"strings"
)

// Describe says how many CPUs the machine has, their model, and its load when the bench started.
func Describe() string {
	cpuinfo := readFile("/proc/cpuinfo")
	cpus := strings.Count(cpuinfo, "processor\t:")
	model := ""
	for _, line := range strings.Split(cpuinfo, "\n") {
		if v, ok := strings.CutPrefix(line, "model name\t: "); ok {
			model = v
			break
		}
	}
	load := strings.Fields(readFile("/proc/loadavg"))
	l := "?"
	if len(load) > 0 {
		l = load[0]
	}
	return fmt.Sprintf("%d CPUs (%s), load average %s at start", cpus, model, l)
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
