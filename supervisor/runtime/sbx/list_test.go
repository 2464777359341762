package sbx

import (
	"reflect"
	"strings"
	"testing"
	"unicode"
)

func TestParseSandboxList(t *testing.T) {
	for _, tc := range []struct {
		what    string
		out     string
		want    []Sandbox
		wantErr string
	}{
		{"empty", "", nil, ""},
		{"JSON object, added fields", `{"sandboxes":[{"name":"dw-a","agent":"shell","status":"running","workspaces":["/w"],"new":{"x":1}},
			{"name":"dw-b","status":"Stopped"}],"total":2}`,
			[]Sandbox{{"dw-a", "running"}, {"dw-b", "stopped"}}, ""},
		{"JSON array, other key spellings", `[{"Name":"dw-a","State":"running"},{"sandbox":"dw-b"}]`,
			[]Sandbox{{"dw-a", "running"}, {"dw-b", ""}}, ""},
		{"JSON null list", `{"sandboxes":null}`, nil, ""},
		{"JSON non-string status", `[{"name":"dw-a","status":3}]`, []Sandbox{{"dw-a", ""}}, ""},
		{"JSON without a name", `[{"status":"running"}]`, nil, "no string name"},
		{"JSON name with a space", `[{"name":"dw a"}]`, nil, "invalid sandbox name"},
		{"JSON object without sandboxes", `{"items2":[]}`, nil, `without "sandboxes"`},
		{"JSON malformed", `[{"name":`, nil, "parse sbx ls --json"},
		{"table (the emulator's)", "SANDBOX   AGENT   STATUS    PORTS   WORKSPACE\n" +
			"dw-a      shell   running           /w,/b:ro\n" +
			"dw-b      shell   stopped           \n",
			[]Sandbox{{"dw-a", "running"}, {"dw-b", "stopped"}}, ""},
		{"table: added and reordered columns, a two-word header", "ID    CREATED AT        NAME   STATUS\n" +
			"1     2026-11-30 15:00  dw-a   running\n",
			[]Sandbox{{"dw-a", "running"}}, ""},
		{"table: header only", "SANDBOX   AGENT   STATUS\n", nil, ""},
		{"table: no name column", "FOO   BAR\nx     y\n", nil, "no SANDBOX or NAME column"},
	} {
		got, err := parseSandboxList([]byte(tc.out))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error = %v, want %q", tc.what, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: parseSandboxList = %+v, %v; want %+v", tc.what, got, err, tc.want)
		}
	}
}

func FuzzParseSandboxList(f *testing.F) {
	for _, s := range []string{"", `{"sandboxes":[{"name":"dw-a","status":"running"}]}`, `[{"name":"x"}]`,
		"SANDBOX   AGENT   STATUS\ndw-a   shell   running\n", "NAME  STATUS\n\n  x  \n", "{", "[null]", `{"sandboxes":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		got, err := parseSandboxList(out)
		if err != nil {
			return
		}
		for _, s := range got {
			if s.Name == "" || strings.IndexFunc(s.Name, unicode.IsSpace) >= 0 {
				t.Fatalf("parsed an invalid name %q from %q", s.Name, out)
			}
			if s.Status != strings.ToLower(s.Status) {
				t.Fatalf("status %q not lower-cased", s.Status)
			}
		}
	})
}

func TestParseTemplateList(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want []string
		ok   bool
	}{
		{"TEMPLATE\nimg:1\nother:2\n", []string{"img:1", "other:2"}, true},
		{"NAME      CREATED\nimg:1     today\n", []string{"img:1"}, true},
		{"REPOSITORY   TAG   ID\nimg          1     abc\n", []string{"img:1"}, true},
		{"TEMPLATE\n", nil, true},
		{"", nil, false},
		{"FOO   BAR\nx     y\n", nil, false},
	} {
		got, ok := parseTemplateList(tc.out)
		if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseTemplateList(%q) = %q, %v; want %q, %v", tc.out, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPolicyScopeSupported(t *testing.T) {
	scoped := `Usage:
  sbx policy allow network RESOURCES [flags]

Flags:
  -g, --global           Apply the rule to all sandboxes (the default)
  -h, --help             help for network
      --sandbox string   Apply the rule to the named sandbox only
`
	// The reference page's flags (no scope), and a help that names
	// --sandbox only in prose.
	unscoped := `Allow sandbox network access to the specified hosts.

Usage:
  sbx policy allow network RESOURCES [flags]

Global Flags:
  -D, --debug   Enable debug logging
`
	prose := unscoped + "\nTo scope a rule, upgrade: newer releases take --sandbox NAME.\n"
	for _, tc := range []struct {
		help string
		want bool
	}{{scoped, true}, {unscoped, false}, {prose, false}, {"", false},
		{"Flags:\n  -s, --sandbox string   one sandbox\n", true},
		{"Flags:\n      --sandboxes string\n", false}} {
		if got := policyScopeSupported(tc.help); got != tc.want {
			t.Errorf("policyScopeSupported(%q) = %v, want %v", tc.help, got, tc.want)
		}
	}
}
