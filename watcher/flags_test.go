package watcher

import (
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    func(*Config) bool
		wantErr string
	}{
		{[]string{"--", "true"}, func(c *Config) bool { return c.Argv[0] == "true" && c.Grace == DefaultGrace && c.User == nil }, ""},
		{[]string{"true", "--x"}, func(c *Config) bool { return len(c.Argv) == 2 && c.Argv[1] == "--x" }, ""},
		{[]string{"--deadline", "5s", "--grace=1s", "--", "sleep", "9"}, func(c *Config) bool { return c.Deadline == 5*time.Second && c.Grace == time.Second }, ""},
		{[]string{"--user", "1000:100", "--", "id"}, func(c *Config) bool { return c.User.UID == 1000 && c.User.GID == 100 }, ""},
		{[]string{"--watcher-user=7:8", "--", "id"}, func(c *Config) bool { return c.WatcherUser == ID{7, 8} }, ""},
		{[]string{"--control=stdin"}, func(c *Config) bool { return c.Control == "stdin" }, ""},
		{[]string{"--control=fd:3"}, func(c *Config) bool { return c.Control == "fd" && c.ControlFD == 3 }, ""},
		{[]string{"--control=stdin"}, func(c *Config) bool { return c.SpecTimeout == DefaultSpecTimeout }, ""},
		{[]string{"--control=stdin", "--spec-timeout=5s"}, func(c *Config) bool { return c.SpecTimeout == 5*time.Second }, ""},
		{[]string{"--control=stdin", "--spec-timeout=0s"}, nil, "not a duration"},
		{[]string{"--spec-timeout=5s", "--", "true"}, nil, "for control mode"},
		{[]string{"--control=fd:3", "--agent-cgroup-fd=7"}, func(c *Config) bool { return c.AgentCgroupFD == 7 && c.ParentFD == 0 }, ""},
		{[]string{"--parent-fd=5", "--", "true"}, func(c *Config) bool { return c.ParentFD == 5 && c.AgentCgroupFD == 0 }, ""},
		{[]string{"--control=fd:3", "--live-fd=9"}, func(c *Config) bool { return c.LiveFD == 9 && c.ParentFD == 0 && c.AgentCgroupFD == 0 }, ""},
		{[]string{"--control=fd:3", "--live-fd=2"}, nil, "--live-fd: \"2\" is not a descriptor above 2"},
		{[]string{"--control=fd:3", "--agent-cgroup-fd=1"}, nil, "--agent-cgroup-fd: \"1\" is not a descriptor above 2"},
		{[]string{"--control=stdin", "--restricted"}, func(c *Config) bool { return c.Restricted && c.Control == "stdin" }, ""},
		{[]string{"--control=stdin"}, func(c *Config) bool { return !c.Restricted }, ""},
		{[]string{"--restricted", "--", "true"}, nil, "--restricted is for control mode"},
		{[]string{"--version"}, func(c *Config) bool { return c.Version }, ""},
		{[]string{}, nil, "no command"},
		{[]string{"--bogus", "--", "true"}, nil, "unknown flag --bogus"},
		{[]string{"--deadline", "soon", "--", "true"}, nil, "not a duration"},
		{[]string{"--grace=-1s", "--", "true"}, nil, "not a duration"},
		{[]string{"--user", "1000", "--", "true"}, nil, "not UID:GID"},
		{[]string{"--user", "0:0", "--", "true"}, nil, "--allow-root"},
		{[]string{"--control=stdin", "--", "true"}, nil, "spec frame"},
		{[]string{"--control=tcp"}, nil, "none of stdin, fd:N, unix:PATH"},
		{[]string{"--control=unix:/run/dw/ctl/s", "--nonce=n1"}, func(c *Config) bool {
			return c.Control == "unix" && c.ControlPath == "/run/dw/ctl/s" && c.Nonce == "n1"
		}, ""},
		{[]string{"--control=unix:s"}, nil, "not unix:/DIR/SOCKET"},
		{[]string{"--control=unix:/s"}, nil, "not unix:/DIR/SOCKET"},
		{[]string{"--control=stdin", "--nonce=n1"}, nil, "--nonce is for the unix control mode"},
		{[]string{"--deadline"}, nil, "needs a value"},
	} {
		c, err := parseFlags(tc.args)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseFlags(%q) error = %v, want one containing %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !tc.want(c) {
			t.Errorf("parseFlags(%q) = %+v, %v", tc.args, c, err)
		}
	}
}
