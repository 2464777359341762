package shared

import "testing"

// Printable: nothing a terminal acts on survives; plain text, unicode
// and tabs do.
func TestPrintable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain name.txt", "plain name.txt"},
		{"tab\there, ünïcode", "tab\there, ünïcode"},
		{"osc52\x1b]52;c;cHduZWQ=\x07", `osc52\x1b]52;c;cHduZWQ=\a`},
		{"csi\u009b31m", `csi\u009b31m`},
		{"two\nlines\r", `two\nlines\r`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"del\x7f", `del\x7f`},
		{`back\slash "quoted"`, `back\slash "quoted"`},
	} {
		if got := Printable(c.in); got != c.want {
			t.Errorf("Printable(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
