package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
)

// Output formats of the read commands.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// addOutputFlag adds -o table|json|yaml to cmd.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", outputTable, "output format: table, json or yaml")
}

func checkKubeOutput(o string) error {
	switch o {
	case outputTable, outputJSON, outputYAML:
		return nil
	}
	return usageError("-o %q: the formats are table, json and yaml", o)
}

// writeData prints v as JSON or YAML.
func writeData(w io.Writer, output string, v any) error {
	if output == outputYAML {
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return writeJSON(w, v)
}

// table prints aligned columns, as kubectl does.
type table struct {
	header []string
	rows   [][]string
}

func (t *table) add(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	t.rows = append(t.rows, cells)
}

func (t *table) write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// shortRevision is the 12-character commit or digest of a revision, "-" for none.
func shortRevision(r *v1alpha1.RevisionStatus) string {
	if r == nil || r.Revision == "" {
		return "-"
	}
	return v1alpha1.ShortRevision(r.Revision)
}

func revisionOf(r *v1alpha1.RevisionStatus) string {
	if r == nil {
		return ""
	}
	return r.Revision
}

// age is how long ago t was, as kubectl prints it ("4m30s", "3d"); "-" for no time.
func age(now time.Time, t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// since is "2026-03-01T10:00:00Z (4m ago)".
func since(now time.Time, t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), age(now, t))
}

// condition returns the condition of type t, or nil.
func condition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// readyOf returns the Ready condition's status, reason and message; Unknown when there is none.
func readyOf(conds []metav1.Condition) (status, reason, message string) {
	c := condition(conds, v1alpha1.ReadyCondition)
	if c == nil {
		return string(metav1.ConditionUnknown), "", ""
	}
	return string(c.Status), c.Reason, c.Message
}

// oneLine keeps a message on one table row.
func oneLine(s string) string { return ops.OneLine(s) }
