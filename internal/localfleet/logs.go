package localfleet

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func (f *Fleet) logDir() string { return filepath.Join(f.Dir, "logs") }

// OpenLog creates a log file in the fleet's log directory that DumpLogs prints with the others.
func (f *Fleet) OpenLog(name string) io.Writer { return f.openLog(name) }

func (f *Fleet) openLog(name string) io.Writer {
	path := filepath.Join(f.logDir(), name)
	file, err := os.Create(path)
	if err != nil {
		return io.Discard
	}
	f.addLogFile(path)
	return file
}

// addLogFile adds path to the logs DumpLogs prints, once.
func (f *Fleet) addLogFile(path string) {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	if !slices.Contains(f.logFiles, path) {
		f.logFiles = append(f.logFiles, path)
	}
}

// DumpLogs writes the last lines of every log of the fleet (API servers, etcd, Flux controllers) to w.
func (f *Fleet) DumpLogs(w io.Writer, lines int) {
	for _, path := range f.logFiles {
		b, err := os.ReadFile(path)
		if err != nil || len(b) == 0 {
			continue
		}
		all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(all) > lines {
			all = all[len(all)-lines:]
		}
		fmt.Fprintf(w, "===== %s (last %d lines) =====\n%s\n", filepath.Base(path), len(all), strings.Join(all, "\n"))
	}
}
