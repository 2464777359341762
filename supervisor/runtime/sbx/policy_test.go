package sbx

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The tables of `sbx policy ls` as the reference has printed them.
const (
	policyLsRules = "NAME                  TYPE      ORIGIN               DECISION   STATUS   RESOURCES\n" +
		"balanced-dev          network   local                allow      active   api.anthropic.com\n" +
		"rule-7                network   sandbox:dw-a         allow      active   localhost:8080\n"
	policyLsGoverned = "Governance: managed by my-org\n[OK] last synced 13:54:21\n" +
		"NAME                      TYPE      ORIGIN     DECISION   STATUS   RESOURCES\n" +
		"allow AI services         network   remote     allow      active   api.anthropic.com\n" +
		"                                                                   api.openai.com\n" +
		"allow Docker services     network   remote     allow      active   *.docker.com\n"
	policyLsProvenance = "PROVENANCE   APPLIES_TO     POLICY/RULE                  TYPE               DECISION   RESOURCES\n" +
		"local        all            default-ai-services          network            allow      api.anthropic.com:443\n" +
		"                                                                                       api.openai.com:443\n" +
		"local        sandbox:dw-a   rule-3                       network            allow      localhost:8080\n"
	policyLsSummary = "POLICY                                 SOURCE   APPLIES TO          SUMMARY\n" +
		"local-policy                           local    all                 network: 42 allow, 1 deny\n" +
		"1b2633ea-e604-48bb-a5e6-3ac86ba383fe   kit      sandbox:my-sandbox  network: 3 allow\n"
	policyLsWide = "POLICY         SOURCE   APPLIES TO     RULE ID   TYPE      DECISION   RESOURCES\n" +
		"local-policy   local    all            r-1       network   allow      api.anthropic.com,api.openai.com\n" +
		"local-policy   local    sandbox:dw-a   r-2       network   allow      localhost:8080\n"
)

func TestParsePolicyList(t *testing.T) {
	for _, tc := range []struct {
		what    string
		out     string
		want    []PolicyRule
		wantErr string
	}{
		{"rules (older)", policyLsRules, []PolicyRule{
			{"balanced-dev", "local", "allow", []string{"api.anthropic.com"}},
			{"rule-7", "sandbox:dw-a", "allow", []string{"localhost:8080"}}}, ""},
		{"governance banner, a name with spaces, a continued row", policyLsGoverned, []PolicyRule{
			{"allow AI services", "remote", "allow", []string{"api.anthropic.com", "api.openai.com"}},
			{"allow Docker services", "remote", "allow", []string{"*.docker.com"}}}, ""},
		{"provenance", policyLsProvenance, []PolicyRule{
			{"default-ai-services", "all", "allow", []string{"api.anthropic.com:443", "api.openai.com:443"}},
			{"rule-3", "sandbox:dw-a", "allow", []string{"localhost:8080"}}}, ""},
		{"current, --wide", policyLsWide, []PolicyRule{
			{"r-1", "all", "allow", []string{"api.anthropic.com", "api.openai.com"}},
			{"r-2", "sandbox:dw-a", "allow", []string{"localhost:8080"}}}, ""},
		{"a header alone: no rules, readable", "NAME   TYPE   ORIGIN   DECISION   STATUS   RESOURCES\n", []PolicyRule{}, ""},
		{"current summary: no rules in it", policyLsSummary, nil, errPolicySummary.Error()},
		{"nothing printed", "", nil, "no header"},
		{"an unknown header", "ID   WHAT\n1    x\n", nil, "no header"},
		{"a row without a decision", "NAME   ORIGIN   DECISION   RESOURCES\nr-1   local   maybe   x\n", nil, "no allow or deny"},
		{"a continuation before any rule", "NAME   ORIGIN   DECISION   RESOURCES\n                              x\n", nil, "without a rule"},
	} {
		got, err := parsePolicyList(tc.out)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error = %v, want %q", tc.what, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: parsePolicyList = %+v, %v\n want %+v", tc.what, got, err, tc.want)
		}
	}
	if r := (PolicyRule{Scope: "sandbox:dw-a"}); r.Sandbox() != "dw-a" {
		t.Errorf("Sandbox() = %q", r.Sandbox())
	}
	for _, s := range []string{"all", "local", "remote", "sandboxes:x"} {
		if got := (PolicyRule{Scope: s}).Sandbox(); got != "" {
			t.Errorf("Sandbox() of scope %q = %q, want none", s, got)
		}
	}
	if _, err := parsePolicyList(policyLsSummary); !errors.Is(err, errPolicySummary) {
		t.Errorf("summary: %v, want errPolicySummary", err)
	}
}

// FuzzParsePolicyList: a listing parses to rules that each have an
// allow or deny decision, or to an error; it never panics.
func FuzzParsePolicyList(f *testing.F) {
	for _, s := range []string{policyLsRules, policyLsGoverned, policyLsProvenance, policyLsSummary, policyLsWide, "",
		"NAME ORIGIN DECISION RESOURCES\n", "DECISION  RESOURCES  ORIGIN\n  \n allow\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		rules, err := parsePolicyList(out)
		if err != nil {
			if rules != nil {
				t.Fatalf("rules %+v beside error %v", rules, err)
			}
			return
		}
		for _, r := range rules {
			if r.Decision != "allow" && r.Decision != "deny" {
				t.Fatalf("rule %+v without a decision from %q", r, out)
			}
		}
	})
}
