package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// view is how get shows the rows of one kind, in every format and as a watch goes on.
type view[T any] struct {
	// kind is what -o name prints before the name (fleetrollout/web); plural is what a list
	// that finds none says it found none of.
	kind, plural string
	key          func(T) (namespace, name string)
	header       []string
	cells        func(T) []string
	// wide and wideCells are the columns -o wide adds after those of the table.
	wide      []string
	wideCells func(T) []string
}

// printRows prints rows in the format of -o. With --watch, the JSON, YAML and JSONPath formats
// print one document per row instead of a list, as the rows of the changes that follow will be.
// It returns the table it printed, nil for the other formats.
func printRows[T any](cmd *cobra.Command, o *getOptions, v view[T], ns string, rows []T) (*table, error) {
	out := cmd.OutOrStdout()
	switch {
	case o.output == outputName:
		return nil, writeNames(out, v.kind, namesOf(rows, func(r T) string { _, n := v.key(r); return n }))
	case o.output != outputTable && o.output != outputWide && o.watch:
		for _, r := range rows {
			if err := writeEvent(out, o.output, r); err != nil {
				return nil, err
			}
		}
		return nil, nil
	case o.output != outputTable && o.output != outputWide:
		return nil, writeData(out, o.output, items[T]{Items: rows})
	}
	header := v.header
	if o.output == outputWide {
		header = v.withWide(header, v.wide)
	}
	t := &table{header: o.withNamespace(header)}
	if len(rows) == 0 {
		o.noneFound(cmd.ErrOrStderr(), v.plural, ns)
		return t, nil
	}
	for _, r := range rows {
		t.add(tableRow(o, v, r)...)
	}
	return t, t.write(out)
}

// tableRow is the cells of r in the table of -o table or -o wide.
func tableRow[T any](o *getOptions, v view[T], r T) []string {
	cells := v.cells(r)
	if o.output == outputWide {
		cells = v.withWide(cells, v.wideCells(r))
	}
	ns, _ := v.key(r)
	return o.row(ns, cells...)
}

// withWide adds the columns of -o wide to the cells of the header or of a row: after the others,
// as kubectl does, but before a last MESSAGE column, which is long.
func (v view[T]) withWide(cells, wide []string) []string {
	if v.header[len(v.header)-1] != "MESSAGE" {
		return append(append([]string{}, cells...), wide...)
	}
	out := append([]string{}, cells[:len(cells)-1]...)
	return append(append(out, wide...), cells[len(cells)-1])
}

// writeEvent prints one row of a watch: -o json as one line, -o yaml as a document of its own,
// -o jsonpath=TEMPLATE as the template's line.
func writeEvent(w io.Writer, output string, row any) error {
	switch output {
	case outputJSON:
		b, err := json.Marshal(row)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case outputYAML:
		b, err := yaml.Marshal(row)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "---\n%s", b)
		return err
	}
	return writeData(w, output, row)
}
