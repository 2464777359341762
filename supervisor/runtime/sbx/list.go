package sbx

// parseSandboxList is the only place the shape of `sbx ls` leaks in.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Sandbox is one listed sandbox.
type Sandbox struct {
	Name   string
	Status string // as the CLI says it, lower-cased: running, stopped, ...
}

// Running reports whether the CLI calls the sandbox running.
func (s Sandbox) Running() bool { return s.Status == "running" }

// parseSandboxList reads `sbx ls --json` (preferred: an array of
// objects, or an object holding one under "sandboxes"), or the table of
// plain `sbx ls` (a header row naming SANDBOX or NAME and STATUS, then
// one row per sandbox). Added fields and columns are ignored; a name
// with white space or control characters is an error, never a guess.
func parseSandboxList(out []byte) ([]Sandbox, error) {
	t := bytes.TrimSpace(out)
	if len(t) == 0 {
		return nil, nil
	}
	if t[0] == '[' || t[0] == '{' {
		return parseSandboxJSON(t)
	}
	return parseSandboxTable(string(t))
}

func parseSandboxJSON(b []byte) ([]Sandbox, error) {
	var rows []map[string]json.RawMessage
	if b[0] == '{' {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(b, &top); err != nil {
			return nil, fmt.Errorf("parse sbx ls --json: %w", err)
		}
		raw, ok := lookup(top, "sandboxes", "items", "Sandboxes")
		if !ok {
			return nil, errors.New(`parse sbx ls --json: an object without "sandboxes"`)
		}
		if string(raw) == "null" {
			return nil, nil
		}
		b = raw
	}
	if err := json.Unmarshal(b, &rows); err != nil {
		return nil, fmt.Errorf("parse sbx ls --json: %w", err)
	}
	var out []Sandbox
	for i, r := range rows {
		var s Sandbox
		raw, ok := lookup(r, "name", "Name", "sandbox", "Sandbox")
		if !ok || json.Unmarshal(raw, &s.Name) != nil {
			return nil, fmt.Errorf("parse sbx ls --json: entry %d has no string name", i)
		}
		if raw, ok := lookup(r, "status", "Status", "state", "State"); ok {
			_ = json.Unmarshal(raw, &s.Status) // a non-string status is unknown, not fatal
		}
		if err := addSandbox(&out, s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func lookup(m map[string]json.RawMessage, keys ...string) (json.RawMessage, bool) {
	for _, k := range keys {
		if v, ok := m[k]; ok {
			return v, true
		}
	}
	return nil, false
}

func parseSandboxTable(text string) ([]Sandbox, error) {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	header := lines[0]
	nameCol, statusCol := -1, -1
	for i, f := range columns(header) {
		switch strings.ToUpper(f.text) {
		case "SANDBOX", "NAME":
			if nameCol < 0 {
				nameCol = i
			}
		case "STATUS", "STATE":
			if statusCol < 0 {
				statusCol = i
			}
		}
	}
	if nameCol < 0 {
		return nil, fmt.Errorf("parse sbx ls: no SANDBOX or NAME column in the header %q", truncate(header, 120))
	}
	hcols := columns(header)
	var out []Sandbox
	for _, line := range lines[1:] {
		if strings.TrimSpace(line) == "" {
			continue
		}
		cells := cellsAt(line, hcols)
		s := Sandbox{Name: cells[nameCol]}
		if statusCol >= 0 {
			s.Status = cells[statusCol]
		}
		if err := addSandbox(&out, s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseTemplateList reads `sbx template ls`: a header naming TEMPLATE,
// NAME or IMAGE (or REPOSITORY and TAG), then one row per template.
// ok is false for a listing it does not know: nothing is concluded.
func parseTemplateList(out string) (names []string, ok bool) {
	lines := strings.Split(strings.ReplaceAll(strings.TrimSpace(out), "\r\n", "\n"), "\n")
	hcols := columns(lines[0])
	m := map[string]int{}
	for i, c := range hcols {
		m[strings.ToUpper(c.text)] = i
	}
	nameCol, tagCol := pick(m, []string{"TEMPLATE", "NAME", "IMAGE", "REPOSITORY"}), -1
	if _, repo := m["REPOSITORY"]; repo && nameCol == m["REPOSITORY"] {
		tagCol = pick(m, []string{"TAG"})
	}
	if nameCol < 0 {
		return nil, false
	}
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) == "" {
			continue
		}
		c := cellsAt(l, hcols)
		n := c[nameCol]
		if tagCol >= 0 && c[tagCol] != "" {
			n += ":" + c[tagCol]
		}
		names = append(names, n)
	}
	return names, true
}

type column struct {
	start int
	text  string
}

// columns splits a header at runs of two or more spaces (a header cell
// may hold one space: "CREATED AT").
func columns(h string) []column {
	var cs []column
	i := 0
	for i < len(h) {
		for i < len(h) && h[i] == ' ' {
			i++
		}
		if i >= len(h) {
			break
		}
		start := i
		for i < len(h) && !(h[i] == ' ' && (i+1 >= len(h) || h[i+1] == ' ')) {
			i++
		}
		cs = append(cs, column{start, h[start:i]})
	}
	return cs
}

// cellsAt cuts a row into the header's columns: by white space when
// that gives exactly one field per column, else at the header's column
// starts (a cell runs from its column's start to the next column's; an
// empty cell stays empty).
func cellsAt(row string, hcols []column) []string {
	if f := strings.Fields(row); len(f) == len(hcols) {
		return f
	}
	cells := make([]string, len(hcols))
	for i, c := range hcols {
		if c.start >= len(row) {
			break
		}
		end := len(row)
		if i+1 < len(hcols) && hcols[i+1].start < end {
			end = hcols[i+1].start
		}
		cells[i] = strings.TrimSpace(row[c.start:end])
	}
	return cells
}

func addSandbox(out *[]Sandbox, s Sandbox) error {
	if s.Name == "" || strings.IndexFunc(s.Name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar }) >= 0 {
		return fmt.Errorf("parse sbx ls: invalid sandbox name %q", truncate(s.Name, 80))
	}
	s.Status = strings.ToLower(strings.TrimSpace(s.Status))
	*out = append(*out, s)
	return nil
}
