package sbx

import (
	"regexp"
	"strings"
	"sync"
)

// scopeFlagRE finds --sandbox defined as a flag in cobra-style help: a
// line of the flags section that starts with it (optionally after a
// shorthand), not a mention in prose.
var scopeFlagRE = lazyRegexp(`(?m)^\s*(-[A-Za-z],\s+)?--sandbox(\s|=|$)`)

// policyScopeSupported reads `sbx policy allow network --help` (its
// stdout) and reports whether a rule can be scoped to one sandbox with
// --sandbox. Without it the runtime refuses --host-port: it never
// widens the machine's global policy.
func policyScopeSupported(helpText string) bool {
	return scopeFlagRE().MatchString(helpText)
}

// PolicyRule is one row of `sbx policy ls`.
type PolicyRule struct {
	Name, Origin, Decision, Resources string
}

// Sandbox is the sandbox a rule is scoped to ("" when it is global or
// from elsewhere): ORIGIN reads "sandbox:NAME".
func (r PolicyRule) Sandbox() string {
	s, _ := strings.CutPrefix(r.Origin, "sandbox:")
	if s == r.Origin {
		return ""
	}
	return s
}

// parsePolicyList reads the table of `sbx policy ls` (NAME, ORIGIN,
// DECISION, RESOURCES columns, others ignored). A listing without those
// columns is unreadable (nil): reconcile then goes by what the journal
// holds. A header alone is an empty, readable list.
func parsePolicyList(out string) []PolicyRule {
	lines := strings.Split(strings.ReplaceAll(strings.TrimSpace(out), "\r\n", "\n"), "\n")
	hcols := columns(lines[0])
	idx := map[string]int{}
	for i, c := range hcols {
		idx[strings.ToUpper(c.text)] = i
	}
	need := []string{"NAME", "ORIGIN", "DECISION", "RESOURCES"}
	for _, k := range need {
		if _, ok := idx[k]; !ok {
			return nil
		}
	}
	rules := []PolicyRule{}
	for _, line := range lines[1:] {
		if strings.TrimSpace(line) == "" {
			continue
		}
		c := cellsAt(line, hcols)
		rules = append(rules, PolicyRule{Name: c[idx["NAME"]], Origin: c[idx["ORIGIN"]], Decision: c[idx["DECISION"]], Resources: c[idx["RESOURCES"]]})
	}
	return rules
}

// lazyRegexp compiles expr on first use: the sbx package is linked into
// every supervisor, and a compile at package init would cost each
// process start (a native launch starts the binary twice) for a
// runtime it may never use.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
