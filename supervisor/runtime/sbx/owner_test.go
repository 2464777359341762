package sbx

import (
	"errors"
	"strings"
	"testing"
)

func TestSandboxName(t *testing.T) {
	const id = "20261130-151001-0123abcd"
	for _, tc := range []struct {
		instance string
		want     string
		wantErr  string
	}{
		{"default", "dw-default-" + id, ""},
		{"ci-run-7", "dw-ci-run-7-" + id, ""},
		{strings.Repeat("a", MaxInstanceLen), "dw-" + strings.Repeat("a", MaxInstanceLen) + "-" + id, ""},
		{strings.Repeat("a", MaxInstanceLen+1), "", "at most 35"},
		{"Upper", "", "lower-case"},
		{"has_underscore", "", "lower-case"},
		{"ci.doctor", "dw-ci.doctor-" + id, ""},
		{"dot.", "", "lower-case"},
		{"-lead", "", "lower-case"},
		{"", "", "lower-case"},
	} {
		got, err := SandboxName(tc.instance, id)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("SandboxName(%q) = %q, %v; want error %q", tc.instance, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want || len(got) > MaxNameLen {
			t.Errorf("SandboxName(%q) = %q, %v; want %q", tc.instance, got, err, tc.want)
		}
		inst, lid, ok := ParseSandboxName(got)
		if !ok || inst != tc.instance || lid != id {
			t.Errorf("ParseSandboxName(%q) = %q, %q, %v", got, inst, lid, ok)
		}
	}
	if _, err := SandboxName("ok", "not-a-launch-id"); err == nil {
		t.Error("SandboxName accepted a malformed launch id")
	}
	for _, name := range []string{"", "dw-", "claude-work", "dw-x-20261130-151001-0123ABCD", "dw--20261130-151001-0123abcd",
		"dw-x_20261130-151001-0123abcd", "xx-default-20261130-151001-0123abcd", "dw-default-20261130-151001-0123abcdX",
		"dw-" + strings.Repeat("a", MaxInstanceLen+1) + "-20261130-151001-0123abcd"} {
		if inst, lid, ok := ParseSandboxName(name); ok {
			t.Errorf("ParseSandboxName(%q) = %q, %q, true; want not ours", name, inst, lid)
		}
	}
}

func TestParseNonce(t *testing.T) {
	if n, err := ParseNonce("0123456789abcdef0123456789abcdef\n"); err != nil || n != "0123456789abcdef0123456789abcdef" {
		t.Errorf("ParseNonce = %q, %v", n, err)
	}
	for _, bad := range []string{"", "cat: can't open '/etc/deathwatch/nonce': No such file", "0123", "0123456789ABCDEF0123"} {
		if _, err := ParseNonce(bad); err == nil {
			t.Errorf("ParseNonce(%q) succeeded", bad)
		}
	}
}

func TestDecide(t *testing.T) {
	const name = "dw-ci-20261130-151001-0123abcd"
	const nonce = "00112233445566778899aabbccddeeff"
	proven := Claim{Name: name, Instance: "ci", Journaled: true, LaunchID: "20261130-151001-0123abcd",
		Nonce: nonce, NonceRead: nonce, OwnerGone: true}
	with := func(f func(*Claim)) Claim { c := proven; f(&c); return c }
	for _, tc := range []struct {
		what string
		c    Claim
		want Verdict
	}{
		{"all proven", proven, Remove},
		{"another instance's sandbox", with(func(c *Claim) { c.Instance = "other" }), Ignore},
		{"an instance whose name is a prefix", with(func(c *Claim) { c.Name = "dw-ci-x-20261130-151001-0123abcd"; c.Instance = "ci" }), Ignore},
		{"not a name this runtime makes", with(func(c *Claim) { c.Name = "claude-work" }), Ignore},
		{"no journal entry", with(func(c *Claim) { c.Journaled = false }), Blocked},
		{"journal's launch id differs", with(func(c *Claim) { c.LaunchID = "20261130-151001-ffffffff" }), Blocked},
		{"nonce unreadable", with(func(c *Claim) { c.NonceRead = ""; c.NonceErr = errors.New("exec failed") }), Blocked},
		{"nonce differs", with(func(c *Claim) { c.NonceRead = "ffffffffffffffffffffffffffffffff" }), Blocked},
		{"owner alive or unknown", with(func(c *Claim) { c.OwnerGone = false }), Blocked},
	} {
		got, why := Decide(tc.c)
		if got != tc.want {
			t.Errorf("%s: Decide = %v (%s), want %v", tc.what, got, why, tc.want)
		}
		if got == Blocked && why == "" {
			t.Errorf("%s: BLOCKED without a reason", tc.what)
		}
	}
}
