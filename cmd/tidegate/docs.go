package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docsFile is where `tidegate docs` writes the reference of the command line, relative to the
// repository root.
const docsFile = "docs/cli.md"

// docsMarker ends the hand-written preface of docs/cli.md; everything after it is generated.
const docsMarker = "<!-- Everything below is generated from the command tree by `make docs` (tidegate docs): edit the commands in cmd/tidegate, not this part of the file. -->"

const defaultDocsPreface = "# The tidegate command line\n\n" + docsMarker + "\n"

func newDocsCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:    "docs",
		Short:  "Write the command line reference (docs/cli.md) from the command tree",
		Hidden: true,
		Args:   exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			old, err := os.ReadFile(file)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return &exitError{code: exitUsage, err: err}
			}
			b := renderCLIDoc(newRootCommand(defaultEnv()), docsPreface(old))
			if err := os.WriteFile(file, b, 0o644); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", file)
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", docsFile, "file to write; its text up to the generated part is kept")
	return cmd
}

// docsPreface is the hand-written part of a docs/cli.md, up to and including the marker line.
func docsPreface(doc []byte) string {
	s := string(doc)
	i := strings.Index(s, docsMarker)
	if i < 0 {
		if strings.TrimSpace(s) == "" {
			return defaultDocsPreface
		}
		return strings.TrimRight(s, "\n") + "\n\n" + docsMarker + "\n"
	}
	return s[:i] + docsMarker + "\n"
}

// renderCLIDoc writes the preface, then one section per command of the tree, then the global flags.
func renderCLIDoc(root *cobra.Command, preface string) []byte {
	// cobra adds the completion command when the command line runs; the reference shows it too.
	root.InitDefaultCompletionCmd()
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		cmds = append(cmds, c)
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub)
			}
		}
	}
	walk(root)

	var b bytes.Buffer
	b.WriteString(preface)
	b.WriteString("\n## Commands\n\n")
	for _, c := range cmds[1:] {
		fmt.Fprintf(&b, "- [`%s`](#%s): %s\n", c.CommandPath(), anchor(c.CommandPath()), c.Short)
	}
	b.WriteString("- [Global flags](#global-flags)\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "\n## %s\n\n%s.\n", c.CommandPath(), strings.TrimSuffix(c.Short, "."))
		if c.Long != "" {
			fmt.Fprintf(&b, "\n```text\n%s\n```\n", strings.TrimRight(c.Long, "\n"))
		}
		if c.Runnable() && !c.HasAvailableSubCommands() {
			fmt.Fprintf(&b, "\nUsage:\n\n```sh\n%s\n```\n", c.UseLine())
		}
		if c.HasAvailableSubCommands() && c != root {
			b.WriteString("\nCommands:\n\n")
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					fmt.Fprintf(&b, "- [`%s`](#%s): %s\n", sub.CommandPath(), anchor(sub.CommandPath()), sub.Short)
				}
			}
		}
		if len(c.Aliases) > 0 {
			fmt.Fprintf(&b, "\nAliases: %s\n", strings.Join(c.Aliases, ", "))
		}
		if c.Example != "" {
			fmt.Fprintf(&b, "\nExamples:\n\n```sh\n%s\n```\n", dedent(c.Example))
		}
		if c == root {
			continue
		}
		if f := commandFlags(c, root); f.HasFlags() {
			fmt.Fprintf(&b, "\nFlags:\n\n```text\n%s```\n", f.FlagUsages())
		}
	}
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			global.AddFlag(f)
		}
	})
	fmt.Fprintf(&b, "\n## Global flags\n\nEvery command takes them (the policy commands ignore them).\n\n```text\n%s```\n", global.FlagUsages())
	return b.Bytes()
}

// commandFlags are the flags of c, its own and those of its parents but not the global ones.
func commandFlags(c, root *cobra.Command) *pflag.FlagSet {
	fs := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	add := func(f *pflag.Flag) {
		if f.Name == "help" || root.PersistentFlags().Lookup(f.Name) == f || fs.Lookup(f.Name) != nil {
			return
		}
		fs.AddFlag(f)
	}
	c.LocalFlags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	return fs
}

// anchor is GitHub's anchor of a heading.
func anchor(heading string) string {
	return strings.ReplaceAll(strings.ToLower(heading), " ", "-")
}

// dedent removes the two spaces cobra's help indents examples with.
func dedent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "  ")
	}
	return strings.Join(lines, "\n")
}
