package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// follow prints a row each time an object that get listed changes, as kubectl get -w does, until
// the command's context is done (an interrupt): it watches list's kind from rv, the
// resourceVersion of what was listed, so that no change between the list and the watch is missed,
// and with the same namespace, selector and name. Table rows keep the columns of t, the table
// already printed.
func follow[T any](cmd *cobra.Command, o *getOptions, c client.Client, v view[T], ns string, args []string, list client.ObjectList, rv string, t *table, toRow func(client.Object) (T, bool)) error {
	wc, ok := c.(client.WithWatch)
	if !ok {
		return fmt.Errorf("the client of the hub cannot watch") // kubeOptions.client makes one that can
	}
	opts, err := selectorOption(o.selector)
	if err != nil {
		return err
	}
	where := "any namespace"
	if !o.allNamespaces {
		opts = append(opts, client.InNamespace(ns))
		where = "namespace " + ns
	}
	if len(args) == 1 {
		opts = append(opts, client.MatchingFields{"metadata.name": args[0]})
	}
	ctx := cmd.Context()
	p := &rowPrinter{out: cmd.OutOrStdout()}
	if t != nil {
		p.widths = t.widths()
		p.header = t.header
		p.headerDone = len(t.rows) > 0
	}
	for {
		// Bookmarks move rv on while nothing changes, so that a watch the API server ends (it ends
		// every watch after a while) starts again from a version it still has.
		raw := &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}
		w, err := wc.Watch(ctx, list, append(opts, &client.ListOptions{Raw: raw})...)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return apiError(err, fmt.Sprintf("watching %s in %s", v.plural, where))
		}
		rv, err = followEvents(ctx, w, rv, func(obj client.Object) error {
			r, ok := toRow(obj)
			if !ok {
				return nil
			}
			switch {
			case o.output == outputName:
				_, name := v.key(r)
				return writeNames(p.out, v.kind, []string{name})
			case o.output == outputTable || o.output == outputWide:
				return p.print(tableRow(o, v, r))
			}
			return writeEvent(p.out, o.output, r)
		})
		w.Stop()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return apiError(err, fmt.Sprintf("watching %s in %s", v.plural, where))
		}
	}
}

// followEvents prints the objects of w's events until w ends or ctx is done, and returns the
// resourceVersion to watch again from.
func followEvents(ctx context.Context, w watch.Interface, rv string, print func(client.Object) error) (string, error) {
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, nil
			}
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					err = fmt.Errorf("%w: the hub no longer has the changes since the list; run the command again", err)
				}
				return rv, err
			}
			obj, ok := ev.Object.(client.Object)
			if !ok {
				return rv, fmt.Errorf("a watch event of type %s carries a %T", ev.Type, ev.Object)
			}
			rv = obj.GetResourceVersion()
			if ev.Type == watch.Bookmark {
				continue
			}
			if err := print(obj); err != nil {
				return rv, err
			}
		}
	}
}

// rowPrinter prints the rows of a watch in the columns of the table printed before them, as
// tabwriter aligned it; a cell wider than its column widens it for the rows after.
type rowPrinter struct {
	out        io.Writer
	header     []string
	widths     []int
	headerDone bool
}

func (p *rowPrinter) print(cells []string) error {
	// t.add writes "-" for an empty cell, as in the table.
	row := (&table{}).addRow(cells)
	if !p.headerDone {
		p.headerDone = true
		p.widths = widen(p.widths, row)
		if err := p.line(p.header); err != nil {
			return err
		}
	}
	p.widths = widen(p.widths, row)
	return p.line(row)
}

func (p *rowPrinter) line(cells []string) error {
	var b strings.Builder
	for i, c := range cells {
		b.WriteString(c)
		if i < len(cells)-1 {
			b.WriteString(strings.Repeat(" ", p.widths[i]-utf8.RuneCountInString(c)+tablePadding))
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(p.out, b.String())
	return err
}

// tablePadding is the space between the columns of a table (table.write's tabwriter padding).
const tablePadding = 3

// widths are the widths of the columns of t, its header and rows.
func (t *table) widths() []int {
	w := widen(nil, t.header)
	for _, r := range t.rows {
		w = widen(w, r)
	}
	return w
}

// widen makes widths as wide as the cells of row.
func widen(widths []int, row []string) []int {
	for i, c := range row {
		if i >= len(widths) {
			widths = append(widths, 0)
		}
		widths[i] = max(widths[i], utf8.RuneCountInString(c))
	}
	return widths
}

// addRow adds cells as add does and returns the row as added.
func (t *table) addRow(cells []string) []string {
	t.add(cells...)
	return t.rows[len(t.rows)-1]
}

// resourceVersion is the resourceVersion of what get read: the object named, or the list.
func resourceVersion(args []string, list client.ObjectList, one client.Object) string {
	if len(args) == 1 {
		return one.GetResourceVersion()
	}
	return list.GetResourceVersion()
}
