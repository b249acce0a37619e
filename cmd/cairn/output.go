package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jsonLines writes one JSON object per line.
type jsonLines struct{ enc *json.Encoder }

func newJSONLines(w io.Writer) *jsonLines {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &jsonLines{enc: enc}
}

func (j *jsonLines) write(v any) error { return j.enc.Encode(v) }

type table struct{ w *tabwriter.Writer }

func newTable(w io.Writer, header ...any) *table {
	t := &table{w: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(t.w, "\t")
		}
		fmt.Fprint(t.w, c)
	}
	fmt.Fprintln(t.w)
}

func (t *table) flush() error { return t.w.Flush() }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// plural says "1 member", "2 members".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
