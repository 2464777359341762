package shared

import (
	"crypto/sha256"
	"reflect"
	"strings"
	"testing"
)

func withCopies(s Spec) Spec {
	s.CopyIn = []string{"/work/src", "/etc/agent.conf"}
	s.CopyOut = []string{"/work/out"}
	s.CopyOutLimit = 1 << 30
	s.CopyOutMaxEntries = 1000
	return s
}

func TestSpecCopiesRoundTrip(t *testing.T) {
	for name, s := range map[string]Spec{
		"full":                    withCopies(fullSpec()),
		"copies only":             {Argv: []string{"true"}, UID: 1000, GID: 1000, CopyIn: []string{"/w"}},
		"copy-out only":           {Argv: []string{"true"}, UID: 1000, GID: 1000, CopyOut: []string{"/w"}, CopyOutLimit: 5},
		"no entry limit":          {Argv: []string{"true"}, UID: 1000, GID: 1000, CopyOut: []string{"/w"}, CopyOutLimit: 5},
		"archive":                 func() Spec { s := withCopies(fullSpec()); s.CopyOutArchive = true; return s }(),
		"archive, no entry limit": {Argv: []string{"true"}, UID: 1000, GID: 1000, CopyOut: []string{"/w"}, CopyOutLimit: 5, CopyOutArchive: true},
	} {
		got, err := ParseSpec(s.Marshal())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(got.Marshal()) != string(s.Marshal()) || strings.Join(got.CopyIn, ",") != strings.Join(s.CopyIn, ",") || got.CopyOutLimit != s.CopyOutLimit || got.CopyOutMaxEntries != s.CopyOutMaxEntries || got.CopyOutArchive != s.CopyOutArchive {
			t.Fatalf("%s: round trip\n got %+v\nwant %+v", name, got, s)
		}
	}
}

func TestSpecCopiesValidate(t *testing.T) {
	for _, c := range []struct {
		s    Spec
		want string
	}{
		{Spec{CopyIn: []string{"rel"}}, "copy_in[0]"},
		{Spec{CopyOut: []string{"/a/../b"}}, "not clean"},
		{Spec{CopyIn: []string{"/"}}, "a copy of / itself"},
		{Spec{CopyOutLimit: -1}, "copy_out_limit"},
		{Spec{CopyOutArchive: true}, "no copy_out to read"},
	} {
		s := fullSpec()
		s.CopyIn, s.CopyOut, s.CopyOutLimit, s.CopyOutArchive = c.s.CopyIn, c.s.CopyOut, c.s.CopyOutLimit, c.s.CopyOutArchive
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.s, err, c.want)
		}
	}
}

func TestCopyEntryCodec(t *testing.T) {
	good := []CopyEntry{
		{Root: 0, Path: "", Kind: CopyDir, Mode: 0o755},
		{Root: 3, Path: "a/b c/\x01odd\n", Kind: CopyFile, Mode: 0o1777, Size: 1 << 40},
		{Path: "l", Kind: CopySymlink, Link: "/etc/passwd"},
		{Path: "h", Kind: CopyHardlink, Link: "a/b"},
		{Path: "e", Kind: CopyFile, Mode: 0o600},
	}
	for _, c := range good {
		got, err := ParseCopyEntry(c.Marshal())
		if err != nil || got != c {
			t.Errorf("round trip %+v: %+v, %v", c, got, err)
		}
	}
	bad := map[string]CopyEntry{
		"dotdot":          {Path: "a/../../x", Kind: CopyFile},
		"absolute":        {Path: "/x", Kind: CopyFile},
		"dot":             {Path: "./x", Kind: CopyFile},
		"double slash":    {Path: "a//x", Kind: CopyFile},
		"trailing slash":  {Path: "a/", Kind: CopyDir},
		"nul":             {Path: "a\x00", Kind: CopyFile},
		"kind":            {Path: "a", Kind: 9},
		"setuid":          {Path: "a", Kind: CopyFile, Mode: 0o4755},
		"dir size":        {Path: "a", Kind: CopyDir, Size: 1},
		"empty symlink":   {Path: "a", Kind: CopySymlink},
		"file with link":  {Path: "a", Kind: CopyFile, Link: "x"},
		"hardlink escape": {Path: "a", Kind: CopyHardlink, Link: "../x"},
		"hardlink root":   {Path: "", Kind: CopyHardlink, Link: "x"},
	}
	for name, c := range bad {
		if _, err := ParseCopyEntry(c.Marshal()); !IsProtocolError(err) {
			t.Errorf("%s: ParseCopyEntry = %v, want a protocol error", name, err)
		}
	}
}

func TestCopyDataEndCodec(t *testing.T) {
	d, err := ParseCopyData(AppendCopyData(nil, 1<<33, []byte("xyz")))
	if err != nil || d.Offset != 1<<33 || string(d.Bytes) != "xyz" {
		t.Fatalf("copy-data: %+v %v", d, err)
	}
	for _, b := range [][]byte{nil, AppendCopyData(nil, 5, nil), AppendCopyData(nil, 0, make([]byte, CopyChunk+1))} {
		if _, err := ParseCopyData(b); !IsProtocolError(err) {
			t.Errorf("copy-data %d bytes: %v, want a protocol error", len(b), err)
		}
	}
	e := CopyEnd{Root: 2, Files: 7, Bytes: 99, Manifest: make([]byte, 32)}
	if got, err := ParseCopyEnd(e.Marshal()); err != nil || !reflect.DeepEqual(got, e) {
		t.Fatalf("copy-end: %+v %v", got, err)
	}
	if _, err := ParseCopyEnd(CopyEnd{Manifest: []byte("short")}.Marshal()); !IsProtocolError(err) {
		t.Fatalf("copy-end with a short digest: %v", err)
	}
	if _, err := ParseCopySum(make([]byte, 31)); !IsProtocolError(err) {
		t.Fatalf("copy-sum of 31 bytes: %v", err)
	}
}

func TestSymlinkStaysInside(t *testing.T) {
	for _, c := range []struct {
		p, t string
		want bool
	}{
		{"a", "b", true},
		{"d/a", "../b", true},
		{"d/e/a", "../../b/c", true},
		{"a", "../b", false},
		{"a", "/etc/passwd", false},
		{"d/a", "x/../../..", false},
		{"d/a", "sub/../b", false}, // ".." after a name could pass through a link
		{"", ".", false},           // the root itself
		{"a", ".", true},
	} {
		if got := SymlinkStaysInside(c.p, c.t); got != c.want {
			t.Errorf("SymlinkStaysInside(%q, %q) = %v, want %v", c.p, c.t, got, c.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{5: "5 bytes", 1536: "1.5 KiB", 2 << 30: "2.0 GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// FuzzCopyDecoders: no copy payload makes a decoder panic, and what
// decodes re-encodes to the same bytes (one encoding per entry).
func FuzzCopyDecoders(f *testing.F) {
	f.Add(CopyEntry{Path: "a/b", Kind: CopyFile, Mode: 0o644, Size: 3}.Marshal())
	f.Add(CopyEntry{Path: "l", Kind: CopySymlink, Link: "../x"}.Marshal())
	f.Add(AppendCopyData(nil, 7, []byte("abc")))
	f.Add(CopyEnd{Root: 1, Files: 2, Bytes: 3, Manifest: make([]byte, 32)}.Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := ParseCopyEntry(b); err == nil {
			if got := c.Marshal(); string(got) != string(b) {
				t.Fatalf("copy-entry %x re-encodes as %x", b, got)
			}
		} else if !IsProtocolError(err) {
			t.Fatalf("copy-entry: %v is not a protocol error", err)
		}
		if e, err := ParseCopyEnd(b); err == nil {
			if got := e.Marshal(); string(got) != string(b) {
				t.Fatalf("copy-end %x re-encodes as %x", b, got)
			}
		}
		ParseCopyData(b)
		ParseCopySum(b)
	})
}

func noCopies(s Spec) Spec {
	s.CopyIn, s.CopyOut, s.CopyOutLimit, s.CopyOutMaxEntries = nil, nil, 0, 0
	return s
}

func TestSHA256MatchesCrypto(t *testing.T) {
	b := make([]byte, 1000)
	for i := range b {
		b[i] = byte(i * 7)
	}
	for _, n := range []int{0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000} {
		h := newSHA256()
		h.Write(b[:n/2])
		h.Write(b[n/2 : n])
		want := sha256.Sum256(b[:n])
		if got := h.Sum(nil); string(got) != string(want[:]) {
			t.Errorf("%d bytes: %x, want %x", n, got, want)
		}
	}
}

func BenchmarkSHA256(b *testing.B) {
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	h := newSHA256()
	for i := 0; i < b.N; i++ {
		h.Write(buf)
	}
}
