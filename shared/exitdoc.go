package shared

//go:generate go run gen_exittable.go

import (
	"errors"
	"fmt"
	"strings"
)

// The README's exit-status table is ExitTable rendered as Markdown
// between these two lines; `go generate ./shared` writes it there and a
// test fails when the README's copy differs.
const (
	ExitTableBegin = "<!-- exit-table: generated from shared/exit.go by go generate ./shared; do not edit -->"
	ExitTableEnd   = "<!-- exit-table end -->"
)

// ExitTableMarkdown is ExitTable as a Markdown table.
func ExitTableMarkdown() string {
	var b strings.Builder
	b.WriteString("| status | meaning |\n|---|---|\n")
	for _, r := range ExitTable {
		fmt.Fprintf(&b, "| %s | %s |\n", r.Code, strings.ReplaceAll(r.Meaning, "|", `\|`))
	}
	return b.String()
}

// ReplaceExitTable returns doc with the text between ExitTableBegin and
// ExitTableEnd replaced by ExitTableMarkdown.
func ReplaceExitTable(doc string) (string, error) {
	before, rest, ok := strings.Cut(doc, ExitTableBegin+"\n")
	if !ok {
		return "", errors.New("no exit-table begin line")
	}
	_, after, ok := strings.Cut(rest, ExitTableEnd)
	if !ok {
		return "", errors.New("no exit-table end line after the begin line")
	}
	return before + ExitTableBegin + "\n" + ExitTableMarkdown() + ExitTableEnd + after, nil
}
