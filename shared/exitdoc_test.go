package shared

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeExitTable: the README's exit-status table is the code's,
// row for row (go generate ./shared writes it).
func TestReadmeExitTable(t *testing.T) {
	doc, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReplaceExitTable(string(doc))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if want != string(doc) {
		t.Errorf("README.md's exit table differs from shared.ExitTable; run go generate ./shared. The code's table:\n%s", ExitTableMarkdown())
	}
	for _, r := range ExitTable {
		if !strings.Contains(string(doc), "| "+r.Code+" | ") {
			t.Errorf("README.md has no row for %s", r.Code)
		}
	}
}

func TestReplaceExitTable(t *testing.T) {
	doc := "intro\n" + ExitTableBegin + "\n| old |\n" + ExitTableEnd + "\nafter\n"
	got, err := ReplaceExitTable(doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n" + ExitTableBegin + "\n" + ExitTableMarkdown() + ExitTableEnd + "\nafter\n"; got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := ReplaceExitTable("no markers\n"); err == nil {
		t.Error("a document without the table's lines: no error")
	}
	if _, err := ReplaceExitTable(ExitTableBegin + "\nno end\n"); err == nil {
		t.Error("a document without the end line: no error")
	}
}
