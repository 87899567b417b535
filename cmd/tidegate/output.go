package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
)

// Output formats of the read commands; get also has outputName and outputWide.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
	outputName  = "name"
	// outputWide is the table with more columns, as kubectl's -o wide.
	outputWide = "wide"
	// outputJSONPath prefixes a template, as kubectl's -o jsonpath=TEMPLATE, over the -o json document.
	outputJSONPath = "jsonpath="
)

// addOutputFlag adds -o table|json|yaml|jsonpath=TEMPLATE to cmd.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", outputTable, "output format: table, json, yaml or jsonpath=TEMPLATE (over the json document)")
}

func checkKubeOutput(o string) error {
	switch {
	case o == outputTable, o == outputJSON, o == outputYAML:
		return nil
	case strings.HasPrefix(o, outputJSONPath):
		if _, err := parseJSONPath(o); err != nil {
			return err
		}
		return nil
	case o == outputWide:
		return usageError("-o wide: only get prints wide tables; the formats here are table, json, yaml and jsonpath=TEMPLATE")
	}
	return usageError("-o %q: the formats are table, json, yaml and jsonpath=TEMPLATE", o)
}

// checkListOutput is checkKubeOutput for the get commands, which also print -o name.
func checkListOutput(o string) error {
	switch {
	case o == outputName, o == outputWide:
		return nil
	case strings.HasPrefix(o, outputJSONPath):
		return checkKubeOutput(o) // its own error names the template's fault
	case checkKubeOutput(o) != nil:
		return usageError("-o %q: the formats are table, wide, name, json, yaml and jsonpath=TEMPLATE", o)
	}
	return nil
}

func parseJSONPath(o string) (*jsonpath.JSONPath, error) {
	tmpl := strings.TrimPrefix(o, outputJSONPath)
	jp := jsonpath.New("output").AllowMissingKeys(true)
	if err := jp.Parse(tmpl); err != nil {
		return nil, usageError("-o %s: %v", o, err)
	}
	return jp, nil
}

// writeNames prints kind/name for each name, as kubectl's -o name.
func writeNames(w io.Writer, kind string, names []string) error {
	for _, n := range names {
		if _, err := fmt.Fprintf(w, "%s/%s\n", kind, n); err != nil {
			return err
		}
	}
	return nil
}

// writeData prints v as JSON, YAML or a JSONPath template over its JSON.
func writeData(w io.Writer, output string, v any) error {
	if strings.HasPrefix(output, outputJSONPath) {
		jp, err := parseJSONPath(output)
		if err != nil {
			return err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			return err
		}
		if err := jp.Execute(w, doc); err != nil {
			return &exitError{code: exitUsage, err: fmt.Errorf("-o %s: %w", output, err)}
		}
		_, err = fmt.Fprintln(w)
		return err
	}
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
