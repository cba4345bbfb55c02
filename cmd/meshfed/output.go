package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/term"
	"sigs.k8s.io/yaml"

	"github.com/meshfed/meshfed/xds/ads"
	"github.com/spf13/cobra"
)

// outputFormat is the -o flag of commands that print tables.
type outputFormat string

func (o *outputFormat) check(allowed ...string) error {
	for _, a := range allowed {
		if string(*o) == a {
			return nil
		}
	}
	return fmt.Errorf("-o %q: want one of %v", string(*o), allowed)
}

// printData writes v as indented JSON or as YAML.
// adminView makes c (which takes one argument) read a value with read
// from one meshfed's admin API (--admin and the other admin flags) and
// print it with table, or as JSON or YAML (--output).
func adminView[T any](c *cobra.Command, read func(c *adminClient, arg string) (T, error), table func(w io.Writer, v T) error) *cobra.Command {
	var (
		af     adminFlags
		output outputFormat
	)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := output.check("table", "json", "yaml"); err != nil {
			return err
		}
		ac, err := af.one(cmd)
		if err != nil {
			return err
		}
		v, err := read(ac, args[0])
		if err != nil {
			return err
		}
		if output != "table" {
			return printData(cmd.OutOrStdout(), output, v)
		}
		return table(cmd.OutOrStdout(), v)
	}
	af.register(c)
	c.Flags().StringVarP((*string)(&output), "output", "o", "table", "table, json or yaml")
	return c
}

func printData(w io.Writer, format outputFormat, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// painter colours states when w is a terminal and NO_COLOR is unset
// (https://no-color.org). tty says that w is a terminal: long texts are
// cut to the screen there, and whole when piped or redirected.
type painter struct{ on, tty bool }

func newPainter(w io.Writer) painter {
	f, ok := w.(*os.File)
	tty := ok && term.IsTerminal(int(f.Fd()))
	return painter{on: tty && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb", tty: tty}
}

// Colours are two-digit SGR codes, so every painted cell of a column
// gains the same number of bytes and tabwriter still aligns it.
const (
	plain  = "39"
	green  = "32"
	yellow = "33"
	red    = "31"
)

func (p painter) paint(color, s string) string {
	if !p.on {
		return s
	}
	return "\x1b[" + color + "m" + s + "\x1b[0m"
}

// state colours a registry or proxy sync state: green when healthy,
// yellow when in progress, red when wrong.
func (p painter) state(s string) string {
	word, _, _ := strings.Cut(s, " (")
	switch word {
	case "Synced", ads.StateSynced:
		return p.paint(green, s)
	case "Starting", "Held", ads.StateStale, ads.StateNotSent:
		return p.paint(yellow, s)
	case "", "-":
		return p.paint(plain, s)
	}
	return p.paint(red, s)
}

// table aligns columns on the visible text, then paints: unlike
// tabwriter, colour codes do not count as width.
type table struct {
	rows  [][]string
	paint map[[2]int]func(string) string // (row, column) → painter
}

func (t *table) row(cells ...string) int {
	t.rows = append(t.rows, cells)
	return len(t.rows) - 1
}

// color paints cell (r, c) with f when written.
func (t *table) color(r, c int, f func(string) string) {
	if t.paint == nil {
		t.paint = map[[2]int]func(string) string{}
	}
	t.paint[[2]int{r, c}] = f
}

func (t *table) write(w io.Writer) {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for ri, r := range t.rows {
		b.Reset()
		for i, c := range r {
			cell := c
			if f := t.paint[[2]int{ri, i}]; f != nil {
				cell = f(c)
			}
			b.WriteString(cell)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}
