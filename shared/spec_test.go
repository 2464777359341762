package shared

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fullSpec sets every field to a non-zero value.
func fullSpec() Spec {
	return Spec{
		Argv:      []string{"/bin/busybox", "sh", "-c", "echo hi; exit 7", ""},
		Env:       []string{"PATH=/usr/bin:/bin", "TOKEN=s3cret=with=equals", "EMPTY="},
		Workdir:   "/work/space",
		UID:       1000,
		GID:       1001,
		AllowRoot: true,
		Deadline:  90 * time.Second,
		Grace:     2 * time.Second,
		Heartbeat: 1500 * time.Millisecond,
		Links:     []Link{{Target: "/workspace", Source: "/Users/me/src/project"}, {Target: "/a/b", Source: "/c"}},
		TTY:       true,
		Rows:      50,
		Cols:      132,
		// Added later: without them the spec ends at Cols.
		AllowUserns: true,
		Seccomp:     []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f},
		Stdin:       true,
	}
}

func TestSpecRoundTrip(t *testing.T) {
	for name, s := range map[string]Spec{
		"full":    fullSpec(),
		"minimal": {Argv: []string{"true"}, UID: 1000, GID: 1000},
		"zero":    {},
		// A later group set, an earlier one empty.
		"stdin only": {Argv: []string{"cat"}, UID: 1000, GID: 1000, Stdin: true},
		"tty":        {Argv: []string{"sh"}, UID: 1000, GID: 1000, TTY: true, Rows: 24, Cols: 80},
		"live only":  {Argv: []string{"sh"}, UID: 1000, GID: 1000, LiveFIFO: "/dev/.deathwatch/live"},
		"full, live": func() Spec { s := fullSpec(); s.LiveFIFO = "/dev/.deathwatch/live"; return s }(),
		"writable":   {Argv: []string{"sh"}, UID: 1000, GID: 1000, Writable: []string{"/tmp", "/dev/null"}},
		"required":   {Argv: []string{"sh"}, UID: 1000, GID: 1000, RequireLandlock: true},
		"full, walls": func() Spec {
			s := withCopies(fullSpec())
			s.LiveFIFO, s.Writable, s.RequireLandlock = "/l", []string{"/tmp"}, true
			return s
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			b := s.Marshal()
			got, err := ParseSpec(b)
			if err != nil {
				t.Fatalf("ParseSpec: %v", err)
			}
			// nil and empty slices encode alike.
			norm := func(s *Spec) {
				if len(s.Argv) == 0 {
					s.Argv = nil
				}
				if len(s.Env) == 0 {
					s.Env = nil
				}
				if len(s.Links) == 0 {
					s.Links = nil
				}
			}
			norm(&got)
			norm(&s)
			if !reflect.DeepEqual(got, s) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, s)
			}
			if again := got.Marshal(); !bytes.Equal(again, b) {
				t.Fatalf("re-marshal differs:\n got % x\nwant % x", again, b)
			}
		})
	}
}

func TestSpecValidateGood(t *testing.T) {
	for name, s := range map[string]Spec{
		"full":          fullSpec(),
		"minimal":       {Argv: []string{"/bin/true"}, UID: 1000, GID: 1000},
		"root allowed":  {Argv: []string{"/bin/true"}, AllowRoot: true},
		"empty arg":     {Argv: []string{"/bin/echo", ""}, UID: 1, GID: 1},
		"env empty val": {Argv: []string{"x"}, Env: []string{"A="}, UID: 1, GID: 1},
		"workdir /":     {Argv: []string{"x"}, Workdir: "/", UID: 1, GID: 1},
		"at the limits": {Argv: make1("a", MaxArgs), Env: make1("A=b", MaxEnv), Links: makeLinks(MaxLinks), UID: 1, GID: 1},
	} {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v, want nil", name, err)
		}
	}
}

func make1(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func makeLinks(n int) []Link {
	out := make([]Link, n)
	for i := range out {
		out[i] = Link{Target: "/t", Source: "/s"}
	}
	return out
}

func TestSpecValidateNamesTheBadField(t *testing.T) {
	ok := func(mod func(*Spec)) Spec {
		s := Spec{Argv: []string{"/bin/true"}, Env: []string{"A=1"}, UID: 1000, GID: 1000}
		mod(&s)
		return s
	}
	long := strings.Repeat("x", MaxStringLen+1)
	cases := []struct {
		name  string
		spec  Spec
		field string // the error must start with "spec: <field>:"
	}{
		{"no argv", ok(func(s *Spec) { s.Argv = nil }), "argv"},
		{"empty argv0", ok(func(s *Spec) { s.Argv = []string{""} }), "argv"},
		{"too many args", ok(func(s *Spec) { s.Argv = make1("a", MaxArgs+1) }), "argv"},
		{"NUL in arg", ok(func(s *Spec) { s.Argv = []string{"/bin/echo", "a\x00b"} }), "argv[1]"},
		{"long arg", ok(func(s *Spec) { s.Argv = []string{"/bin/echo", "x", long} }), "argv[2]"},
		{"too many env", ok(func(s *Spec) { s.Env = make1("A=b", MaxEnv+1) }), "env"},
		{"env without =", ok(func(s *Spec) { s.Env = []string{"A=1", "NOVALUE"} }), "env[1]"},
		{"env empty name", ok(func(s *Spec) { s.Env = []string{"=x"} }), "env[0]"},
		{"env NUL", ok(func(s *Spec) { s.Env = []string{"SECRET=a\x00"} }), "env SECRET"},
		{"env long", ok(func(s *Spec) { s.Env = []string{"BIG=" + long} }), "env BIG"},
		{"workdir relative", ok(func(s *Spec) { s.Workdir = "work" }), "workdir"},
		{"workdir unclean", ok(func(s *Spec) { s.Workdir = "/work/../etc" }), "workdir"},
		{"workdir trailing slash", ok(func(s *Spec) { s.Workdir = "/work/" }), "workdir"},
		{"workdir NUL", ok(func(s *Spec) { s.Workdir = "/wo\x00rk" }), "workdir"},
		{"uid 0", ok(func(s *Spec) { s.UID = 0 }), "uid"},
		{"gid 0", ok(func(s *Spec) { s.GID = 0 }), "gid"},
		{"negative deadline", ok(func(s *Spec) { s.Deadline = -time.Second }), "deadline"},
		{"negative grace", ok(func(s *Spec) { s.Grace = -1 }), "grace"},
		{"negative heartbeat", ok(func(s *Spec) { s.Heartbeat = -time.Millisecond }), "heartbeat"},
		{"too many links", ok(func(s *Spec) { s.Links = makeLinks(MaxLinks + 1) }), "links"},
		{"link target relative", ok(func(s *Spec) { s.Links = []Link{{Target: "t", Source: "/s"}} }), "links[0].target"},
		{"link target /", ok(func(s *Spec) { s.Links = []Link{{Target: "/ok", Source: "/s"}, {Target: "/", Source: "/s"}} }), "links[1].target"},
		{"link target unclean", ok(func(s *Spec) { s.Links = []Link{{Target: "/a//b", Source: "/s"}} }), "links[0].target"},
		{"link source relative", ok(func(s *Spec) { s.Links = []Link{{Target: "/t", Source: "../s"}} }), "links[0].source"},
		{"link source empty", ok(func(s *Spec) { s.Links = []Link{{Target: "/t"}} }), "links[0].source"},
		{"uid -1", ok(func(s *Spec) { s.UID = 1<<32 - 1 }), "uid"},
		{"gid -1", ok(func(s *Spec) { s.GID = 1<<32 - 1 }), "gid"},
		{"watcher uid", ok(func(s *Spec) { s.UID = DefaultWatcherUID }), "uid"},
		{"watcher gid", ok(func(s *Spec) { s.GID = DefaultWatcherGID }), "gid"},
		{"grace that overflows a sum", ok(func(s *Spec) { s.Deadline, s.Grace = time.Hour, 2562047*time.Hour }), "grace"},
		{"deadline too long", ok(func(s *Spec) { s.Deadline = MaxDuration + 1 }), "deadline"},
		{"heartbeat too long", ok(func(s *Spec) { s.Heartbeat = 1<<63 - 1 }), "heartbeat"},
		{"filter not whole instructions", ok(func(s *Spec) { s.Seccomp = make([]byte, 12) }), "seccomp"},
		{"window size without tty", ok(func(s *Spec) { s.Rows, s.Cols = 24, 80 }), "rows/cols"},
		{"live fifo relative", ok(func(s *Spec) { s.LiveFIFO = "dev/live" }), "live_fifo"},
		{"live fifo unclean", ok(func(s *Spec) { s.LiveFIFO = "/dev/../live" }), "live_fifo"},
		{"writable relative", ok(func(s *Spec) { s.Writable = []string{"/tmp", "work"} }), "writable[1]"},
		{"writable unclean", ok(func(s *Spec) { s.Writable = []string{"/tmp/"} }), "writable[0]"},
		{"writable too many", ok(func(s *Spec) { s.Writable = make([]string, MaxWritable+1) }), "writable"},
		{"over one frame", ok(func(s *Spec) { s.Env = make1("BIG="+strings.Repeat("x", MaxStringLen-4), 9) }), "size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.spec.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %s", c.field)
			}
			if want := "spec: " + c.field + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Validate() = %q, want it to start with %q", err, want)
			}
			if strings.Contains(err.Error(), "s3cret") || len(err.Error()) > 300 {
				t.Fatalf("the error echoes too much: %d bytes", len(err.Error()))
			}
		})
	}
}

// TestSpecValidateHidesEnvValues: an error about an env variable names
// the variable, never its value (the value may be a secret).
func TestSpecValidateHidesEnvValues(t *testing.T) {
	s := Spec{Argv: []string{"x"}, Env: []string{"API_KEY=hunter2\x00"}, UID: 1, GID: 1}
	err := s.Validate()
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("Validate() = %v: want an error that does not echo the value", err)
	}
}

func TestParseSpecMalformed(t *testing.T) {
	good := fullSpec().Marshal()
	hugeCount := func() []byte { var e enc; e.u64(1 << 40); return e.b }
	linksAt := func() []byte {
		// The fields up to the links count, then a count far beyond the
		// bytes that follow.
		var e enc
		e.strs([]string{"x"})
		e.strs(nil)
		e.str("")
		e.u64(0)
		e.u64(0)
		e.boolean(false)
		e.i64(0)
		e.i64(0)
		e.i64(0)
		e.u64(1000)
		return append(e.b, 0, 0, 0, 0, 0)
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "argv"},
		{"argv count beyond the bytes", hugeCount(), "argv"},
		{"links count beyond the bytes", linksAt(), "links"},
		{"bad boolean", func() []byte {
			var e enc
			e.strs([]string{"x"})
			e.strs(nil)
			e.str("")
			e.u64(1)
			e.u64(1)
			e.u64(2) // allow_root
			return append(e.b, make([]byte, 10)...)
		}(), "allow_root"},
		{"trailing", append(func() []byte {
			s := withCopies(fullSpec())
			s.CopyOutArchive, s.LiveFIFO = true, "/l"
			s.Writable, s.RequireLandlock = []string{"/tmp"}, true
			return s.Marshal()
		}(), 9), "trailing"},
		{"max entries 0", append(func() []byte { s := withCopies(fullSpec()); s.CopyOutMaxEntries = 0; return s.Marshal() }(), 0), "non-canonical"},
		{"archive false", append(withCopies(fullSpec()).Marshal(), 0), "copy_out_archive"},
		{"copies empty", append(append([]byte{}, good...), 0, 0, 0), "non-canonical"},
		{"truncated filter", noStdin(fullSpec()).Marshal()[:len(noStdin(fullSpec()).Marshal())-1], "seccomp"},
		{"empty tail", append(oldSpec(fullSpec()).Marshal(), 0, 0), "non-canonical"},
		{"stdin false", append(oldSpec(fullSpec()).Marshal(), 0, 0, 0), "non-canonical"},
		{"stdin not a boolean", append(oldSpec(fullSpec()).Marshal(), 0, 0, 2), "stdin"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSpec(c.b)
			if !IsProtocolError(err) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseSpec = %v, want a ProtocolError mentioning %q", err, c.want)
			}
		})
	}
}

// FuzzSpec feeds arbitrary bytes to ParseSpec, validates what parses and
// requires that it re-marshals to exactly the bytes it came from (one
// encoding per spec: no field can hide in a non-canonical form).
func FuzzSpec(f *testing.F) {
	f.Add(fullSpec().Marshal())
	f.Add(Spec{Argv: []string{"/bin/true"}, UID: 1000, GID: 1000}.Marshal())
	f.Add(Spec{}.Marshal())
	f.Add(Spec{Argv: []string{"a\x00b"}, Workdir: "rel", Deadline: -1, Links: []Link{{Target: "/", Source: "x"}}}.Marshal())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSpec(b)
		if err != nil {
			if !IsProtocolError(err) {
				t.Fatalf("ParseSpec: %v (%T), want a ProtocolError", err, err)
			}
			return
		}
		if err := s.Validate(); err != nil && !strings.HasPrefix(err.Error(), "spec: ") {
			t.Fatalf("Validate() = %q, want a spec: prefix", err)
		}
		if again := s.Marshal(); !bytes.Equal(again, b) {
			t.Fatalf("spec % x re-marshals to % x", b, again)
		}
	})
}

// oldSpec is s as a supervisor before the filter fields sent it.
func oldSpec(s Spec) Spec {
	s.AllowUserns, s.Seccomp = false, nil
	return noStdin(s)
}

// noStdin is s as a supervisor before the stdin field sent it.
func noStdin(s Spec) Spec {
	s.Stdin = false
	return s
}

// A spec from an older supervisor (no filter fields) still parses, with
// no filter.
func TestSpecWithoutFilterFields(t *testing.T) {
	old := oldSpec(fullSpec())
	b := fullSpec().Marshal()
	n := len(old.Marshal())
	got, err := ParseSpec(b[:n])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, old) {
		t.Fatalf("got %#v\nwant %#v", got, old)
	}
}

// A spec from a supervisor with the filter fields but before the stdin
// field still parses, without a stdin relay; so does one with only the
// stdin field set (the filter group present but empty).
func TestSpecWithoutStdinField(t *testing.T) {
	for name, want := range map[string]Spec{
		"filter, no stdin": noStdin(fullSpec()),
		"stdin, no filter": func() Spec { s := fullSpec(); s.AllowUserns, s.Seccomp = false, nil; return s }(),
	} {
		t.Run(name, func(t *testing.T) {
			b := want.Marshal()
			got, err := ParseSpec(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %#v\nwant %#v", got, want)
			}
		})
	}
	if n, m := len(noStdin(fullSpec()).Marshal()), len(fullSpec().Marshal()); m != n+1 {
		t.Fatalf("the stdin field takes %d bytes, want 1", m-n)
	}
}

// A spec without a live FIFO is byte for byte what a supervisor before
// the field sent; one with it carries it as its last group, and a group
// present but empty is refused (one encoding per spec).
func TestSpecLiveFIFOField(t *testing.T) {
	s := fullSpec()
	before := s.Marshal()
	s.LiveFIFO = "/dev/.deathwatch/live"
	with := s.Marshal()
	if !bytes.HasPrefix(with, before) {
		t.Fatal("the live FIFO changed the bytes of the fields before it")
	}
	var e enc
	e.strs(nil)
	e.strs(nil)
	e.u64(0)
	e.u64(0)
	e.boolean(false)
	e.str("")
	got, err := ParseSpec(append(before[:len(before):len(before)], e.b...))
	if err == nil || !strings.Contains(err.Error(), "live_fifo") {
		t.Fatalf("ParseSpec(empty live_fifo) = %+v, %v; want a non-canonical error naming live_fifo", got.LiveFIFO, err)
	}
	if got, err := ParseSpec(with); err != nil || got.LiveFIFO != s.LiveFIFO {
		t.Fatalf("ParseSpec = %q, %v", got.LiveFIFO, err)
	}
}

// A spec without write limits is byte for byte what a supervisor before
// the fields sent; one with them carries them as its last group, whose
// empty form is refused (one encoding per spec).
func TestSpecWritableField(t *testing.T) {
	s := fullSpec()
	s.LiveFIFO = "/dev/.deathwatch/live"
	before := s.Marshal()
	s.Writable = []string{"/tmp", "/work"}
	with := s.Marshal()
	if !bytes.HasPrefix(with, before) {
		t.Fatal("the write limits changed the bytes of the fields before them")
	}
	var e enc
	e.strs(nil)
	e.boolean(false)
	if _, err := ParseSpec(append(before[:len(before):len(before)], e.b...)); err == nil || !strings.Contains(err.Error(), "writable") {
		t.Fatalf("ParseSpec(empty writable group) = %v; want a non-canonical error naming writable", err)
	}
	if got, err := ParseSpec(with); err != nil || !reflect.DeepEqual(got.Writable, s.Writable) || got.RequireLandlock {
		t.Fatalf("ParseSpec = %q %v, %v", got.Writable, got.RequireLandlock, err)
	}
}
