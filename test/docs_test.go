package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docBudgets bounds each kind of documentation page, in lines: a page past
// its budget has grown by narrating rather than deciding, and is folded
// (superseded figures, decisions that moved beside other code) before more
// is added.
var docBudgets = []struct {
	glob  string
	lines int
}{
	{"README.md", 450},
	{"docs/*.md", 300},
	{"*/DESIGN.md", 600},
	{"*/*/DESIGN.md", 600},
}

func TestDocs_EveryPageWithinItsBudget(t *testing.T) {
	pages := 0
	for _, b := range docBudgets {
		paths, err := filepath.Glob(filepath.Join("..", b.glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if n := strings.Count(string(data), "\n"); n > b.lines {
				t.Errorf("%s has %d lines, over its budget of %d: fold superseded text, or move decisions beside the code they decide", strings.TrimPrefix(p, "../"), n, b.lines)
			}
		}
	}
	if pages < 10 {
		t.Fatalf("found %d documentation pages; the globs no longer match the repository's layout", pages)
	}
}
