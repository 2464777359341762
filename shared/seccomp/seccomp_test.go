package seccomp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// run interprets p the way the kernel does for the subset of classic
// BPF the generator emits, against seccomp_data{nr, arch, args}.
func run(t *testing.T, p []Insn, arch uint32, nr int32, args ...uint64) uint32 {
	t.Helper()
	var data [64]byte
	binary.LittleEndian.PutUint32(data[0:], uint32(nr))
	binary.LittleEndian.PutUint32(data[4:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(data[16+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(p); pc++ {
		in := p[pc]
		switch in.Code {
		case ldAbsW:
			if in.K%4 != 0 || in.K+4 > uint32(len(data)) {
				t.Fatalf("pc %d: load at %d outside seccomp_data", pc, in.K)
			}
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case jumpAlways:
			pc += int(in.K)
		case jeqK, jgeK, jsetK:
			var ok bool
			switch in.Code {
			case jeqK:
				ok = acc == in.K
			case jgeK:
				ok = acc >= in.K
			default:
				ok = acc&in.K != 0
			}
			if ok {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case retK:
			return in.K
		default:
			t.Fatalf("pc %d: opcode %#x the generator should not emit", pc, in.Code)
		}
	}
	t.Fatalf("the program ran off its end")
	return 0
}

func TestProgram(t *testing.T) {
	const (
		eperm  = RetErrno | 1
		enosys = RetErrno | 38
	)
	type call struct {
		name   string
		arch   uint32
		nr     int32
		args   []uint64
		want   uint32 // without and with AllowUserns
		userns uint32
	}
	x, a := uint32(ArchX86_64), uint32(ArchAArch64)
	calls := []call{
		{"read amd64", x, 0, nil, RetAllow, RetAllow},
		{"read arm64", a, 63, nil, RetAllow, RetAllow},
		{"keyctl amd64", x, 250, nil, eperm, eperm},
		{"keyctl arm64", a, 219, nil, eperm, eperm},
		{"add_key", x, 248, nil, eperm, eperm},
		{"request_key arm64", a, 218, nil, eperm, eperm},
		{"bpf", x, 321, nil, eperm, eperm},
		{"perf_event_open arm64", a, 241, nil, eperm, eperm},
		{"io_uring_setup", x, 425, nil, eperm, eperm},
		{"userfaultfd", x, 323, nil, eperm, eperm},
		{"init_module", x, 175, nil, eperm, eperm},
		{"clock_settime", x, 227, nil, eperm, eperm},
		{"open_by_handle_at", x, 304, nil, eperm, eperm},
		{"name_to_handle_at stays (Docker)", x, 303, nil, RetAllow, RetAllow},
		{"ptrace stays (Docker, 4.8+)", x, 101, nil, RetAllow, RetAllow},
		{"mount", x, 165, nil, eperm, RetAllow},
		{"mount arm64", a, 40, nil, eperm, RetAllow},
		{"fsopen", x, 430, nil, eperm, RetAllow},
		{"setns", x, 308, nil, eperm, RetAllow},
		{"unshare(CLONE_NEWUSER)", x, 272, []uint64{0x10000000}, eperm, RetAllow},
		{"unshare(CLONE_NEWUSER|CLONE_NEWNET) arm64", a, 97, []uint64{0x50000000}, eperm, RetAllow},
		{"unshare(CLONE_NEWNS)", x, 272, []uint64{0x20000}, RetAllow, RetAllow},
		{"clone(SIGCHLD) (fork)", x, 56, []uint64{17}, RetAllow, RetAllow},
		{"clone(CLONE_NEWUSER)", x, 56, []uint64{0x10000000 | 17}, eperm, RetAllow},
		{"clone(CLONE_NEWUSER) arm64", a, 220, []uint64{0x10000000 | 17}, eperm, RetAllow},
		{"clone3", x, 435, nil, enosys, RetAllow},
		{"personality(PER_LINUX)", x, 135, []uint64{0}, RetAllow, RetAllow},
		{"personality(query)", x, 135, []uint64{0xffffffff}, RetAllow, RetAllow},
		{"personality(PER_LINUX32|UNAME26)", a, 92, []uint64{0x20008}, RetAllow, RetAllow},
		{"personality(READ_IMPLIES_EXEC)", x, 135, []uint64{0x0400000}, eperm, eperm},
		{"personality(ADDR_NO_RANDOMIZE)", x, 135, []uint64{0x0040000}, eperm, eperm},
		{"x32 read", x, 0x40000000, nil, RetKill, RetKill},
		{"x32 keyctl", x, 0x40000000 | 250, nil, RetKill, RetKill},
		{"i386", 0x40000003, 1, nil, RetKill, RetKill},
		{"arm (32-bit)", 0x40000028, 1, nil, RetKill, RetKill},
		{"riscv64", 0xc00000f3, 1, nil, RetKill, RetKill},
		{"arm64 number of amd64 keyctl is allowed on arm64", a, 250, nil, RetAllow, RetAllow},
	}
	strict, open := Program(Options{}), Program(Options{AllowUserns: true})
	for _, c := range calls {
		if got := run(t, strict, c.arch, c.nr, c.args...); got != c.want {
			t.Errorf("%s: %#x, want %#x", c.name, got, c.want)
		}
		if got := run(t, open, c.arch, c.nr, c.args...); got != c.userns {
			t.Errorf("%s with AllowUserns: %#x, want %#x", c.name, got, c.userns)
		}
	}
	if n := len(strict); n > 400 {
		t.Errorf("the program has %d instructions; it was about 250", n)
	}
}

// Every rule's number names the same call on every architecture it
// has: a number used twice in one table is a typo.
func TestRulesDistinct(t *testing.T) {
	for _, nr := range []func(rule) int{func(r rule) int { return r.amd64 }, func(r rule) int { return r.arm64 }} {
		seen := map[int]string{}
		for _, r := range rules {
			n := nr(r)
			if n < 0 {
				continue
			}
			if other, ok := seen[n]; ok {
				t.Errorf("%s and %s share number %d", r.name, other, n)
			}
			seen[n] = r.name
		}
	}
}

func TestMarshal(t *testing.T) {
	p := Program(Options{})
	b := Marshal(p)
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(p) {
		t.Fatal("Unmarshal(Marshal(p)) differs from p")
	}
	if !bytes.Equal(Default(false), b) {
		t.Fatal("Default(false) differs from the strict program")
	}
	for _, bad := range [][]byte{nil, make([]byte, 7), make([]byte, 8*(MaxInsns+1))} {
		if _, err := Unmarshal(bad); err == nil {
			t.Errorf("Unmarshal of %d bytes succeeded", len(bad))
		}
	}
}
