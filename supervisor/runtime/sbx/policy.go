package sbx

// The shapes of `sbx policy`: the sandbox-scope probe of its help, and
// the one parser of every documented `sbx policy ls` table.

import (
	"errors"
	"fmt"
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

// PolicyRule is one rule of `sbx policy ls`.
type PolicyRule struct {
	Name      string   // the rule's name or id
	Scope     string   // as listed: "all", "local", "remote", "sandbox:NAME", a profile
	Decision  string   // allow | deny
	Resources []string // hosts or patterns, one a destination
}

// Sandbox is the sandbox the rule is scoped to, "" when it is global or
// from elsewhere: the scope reads "sandbox:NAME".
func (r PolicyRule) Sandbox() string {
	s, ok := strings.CutPrefix(r.Scope, "sandbox:")
	if !ok {
		return ""
	}
	return s
}

// errPolicySummary is a listing of policies, not of rules: the current
// CLI prints `POLICY SOURCE APPLIES TO SUMMARY` and shows the rules
// only with --wide.
var errPolicySummary = errors.New("sbx policy ls printed a summary per policy, no rules")

// The column names of each documented `sbx policy ls` table, by what
// the column holds:
//
//	NAME TYPE ORIGIN DECISION STATUS RESOURCES            (rules, older)
//	PROVENANCE APPLIES_TO POLICY/RULE TYPE DECISION RESOURCES [STATUS]
//	POLICY SOURCE APPLIES TO SUMMARY                      (current; rules with --wide)
//
// The current reference shows no --wide table: any header that names a
// rule, a scope, a decision and resources is read.
var (
	ruleNameCols  = []string{"RULE ID", "RULE", "ID", "POLICY/RULE", "NAME"}
	ruleScopeCols = []string{"APPLIES TO", "APPLIES_TO", "ORIGIN", "SCOPE"}
	decisionCols  = []string{"DECISION"}
	resourceCols  = []string{"RESOURCES", "RESOURCE"}
)

// parsePolicyList reads a `sbx policy ls` table into its rules. Lines
// before the header (the governance banner) are skipped; a row whose
// name and decision are empty continues the previous rule's resources.
// Anything else it cannot read is an error, never an empty list: the
// summary table is errPolicySummary, a header it does not know or a row
// without a decision is an error.
func parsePolicyList(out string) ([]PolicyRule, error) {
	lines := strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n")
	hdr, hcols := -1, []column(nil)
	var idx map[string]int
	for i, l := range lines {
		cs := columns(l)
		m := map[string]int{}
		for j, c := range cs {
			m[strings.ToUpper(c.text)] = j
		}
		if _, ok := m["SUMMARY"]; ok {
			if _, ok := m["DECISION"]; !ok {
				return nil, errPolicySummary
			}
		}
		if pick(m, ruleScopeCols) >= 0 && pick(m, decisionCols) >= 0 && pick(m, resourceCols) >= 0 {
			hdr, hcols, idx = i, cs, m
			break
		}
	}
	if hdr < 0 {
		return nil, fmt.Errorf("read sbx policy ls: no header naming a scope, DECISION and RESOURCES (it begins %q)", truncate(strings.TrimSpace(out), 120))
	}
	name, scope, decision, res := pick(idx, ruleNameCols), pick(idx, ruleScopeCols), pick(idx, decisionCols), pick(idx, resourceCols)
	cell := func(c []string, i int) string {
		if i < 0 {
			return ""
		}
		return c[i]
	}
	rules := []PolicyRule{}
	for _, line := range lines[hdr+1:] {
		if strings.TrimSpace(line) == "" {
			continue
		}
		c := cellsAt(line, hcols)
		r := PolicyRule{Name: cell(c, name), Scope: cell(c, scope), Decision: strings.ToLower(cell(c, decision)), Resources: splitResources(cell(c, res))}
		if r.Name == "" && r.Decision == "" && r.Scope == "" {
			if len(rules) == 0 || len(r.Resources) == 0 {
				return nil, fmt.Errorf("read sbx policy ls: a row without a rule: %q", truncate(strings.TrimSpace(line), 120))
			}
			last := &rules[len(rules)-1]
			last.Resources = append(last.Resources, r.Resources...)
			continue
		}
		if r.Decision != "allow" && r.Decision != "deny" {
			return nil, fmt.Errorf("read sbx policy ls: row %q has no allow or deny decision", truncate(strings.TrimSpace(line), 120))
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// pick is the index of the first of names that m holds, or -1.
func pick(m map[string]int, names []string) int {
	for _, n := range names {
		if i, ok := m[n]; ok {
			return i
		}
	}
	return -1
}

// splitResources cuts a RESOURCES cell at commas and white space.
func splitResources(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}

// lazyRegexp compiles expr on first use: the sbx package is linked into
// every supervisor, and a compile at package init would cost each
// process start (a native launch starts the binary twice) for a
// runtime it may never use.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
