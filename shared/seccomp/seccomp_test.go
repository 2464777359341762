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
		eafno  = RetErrno | 97
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
		{"rseq_slice_yield, the last of the table", x, 471, nil, enosys, enosys},
		{"past the table", x, 472, nil, enosys, enosys},
		{"far past the table arm64", a, 100000, nil, enosys, enosys},
		{"amd64's hole 335..423", x, 400, nil, enosys, enosys},
		{"uretprobe (Docker allows)", x, 335, nil, RetAllow, RetAllow},
		{"uprobe (Docker does not list it)", x, 336, nil, enosys, enosys},
		{"file_getattr (newer than Docker's list)", x, 468, nil, enosys, enosys},
		{"file_setattr arm64", a, 469, nil, enosys, enosys},
		{"move_pages", x, 279, nil, enosys, enosys},
		{"kcmp (Docker: CAP_SYS_PTRACE)", x, 312, nil, eperm, eperm},
		{"mbind (Docker: CAP_SYS_NICE)", x, 237, nil, eperm, eperm},
		{"set_mempolicy", x, 238, nil, eperm, eperm},
		{"set_mempolicy arm64", a, 237, nil, eperm, eperm},
		{"set_mempolicy_home_node", x, 450, nil, eperm, eperm},
		{"vhangup", x, 153, nil, eperm, eperm},
		{"landlock_restrict_self", x, 446, nil, RetAllow, RetAllow},
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
		{"adjtimex (Docker allows)", x, 159, nil, eperm, eperm},
		{"open_by_handle_at", x, 304, nil, eperm, eperm},
		{"name_to_handle_at stays (Docker)", x, 303, nil, RetAllow, RetAllow},
		{"ptrace stays (Docker, 4.8+)", x, 101, nil, RetAllow, RetAllow},
		{"arch_prctl amd64", x, 158, nil, RetAllow, RetAllow},
		{"mount", x, 165, nil, eperm, RetAllow},
		{"mount arm64", a, 40, nil, eperm, RetAllow},
		{"fsopen", x, 430, nil, eperm, RetAllow},
		{"open_tree_attr", x, 467, nil, eperm, RetAllow},
		{"setns", x, 308, nil, eperm, RetAllow},
		{"chroot", x, 161, nil, eperm, RetAllow},
		{"sethostname", x, 170, nil, eperm, RetAllow},
		{"unshare(CLONE_NEWUSER)", x, 272, []uint64{0x10000000}, eperm, RetAllow},
		{"unshare(CLONE_NEWUSER|CLONE_NEWNET) arm64", a, 97, []uint64{0x50000000}, eperm, RetAllow},
		{"unshare(CLONE_NEWNS)", x, 272, []uint64{0x20000}, eperm, RetAllow},
		{"unshare(CLONE_FILES)", x, 272, []uint64{0x400}, RetAllow, RetAllow},
		{"clone(SIGCHLD) (fork)", x, 56, []uint64{17}, RetAllow, RetAllow},
		{"clone(CLONE_VM|CLONE_VFORK|SIGCHLD)", x, 56, []uint64{0x4111}, RetAllow, RetAllow},
		{"clone(CLONE_NEWUSER)", x, 56, []uint64{0x10000000 | 17}, eperm, RetAllow},
		{"clone(CLONE_NEWPID)", x, 56, []uint64{0x20000000 | 17}, eperm, RetAllow},
		{"clone(CLONE_NEWUSER) arm64", a, 220, []uint64{0x10000000 | 17}, eperm, RetAllow},
		{"clone3", x, 435, nil, enosys, RetAllow},
		{"personality(PER_LINUX)", x, 135, []uint64{0}, RetAllow, RetAllow},
		{"personality(query)", x, 135, []uint64{0xffffffff}, RetAllow, RetAllow},
		{"personality(PER_LINUX32|UNAME26)", a, 92, []uint64{0x20008}, RetAllow, RetAllow},
		{"personality(READ_IMPLIES_EXEC)", x, 135, []uint64{0x0400000}, eperm, eperm},
		{"personality(ADDR_NO_RANDOMIZE)", x, 135, []uint64{0x0040000}, eperm, eperm},
		{"socket(AF_UNIX)", x, 41, []uint64{1, 1}, RetAllow, RetAllow},
		{"socket(AF_INET)", x, 41, []uint64{2, 2}, RetAllow, RetAllow},
		{"socket(AF_INET6) arm64", a, 198, []uint64{10, 1}, RetAllow, RetAllow},
		{"socket(AF_NETLINK)", x, 41, []uint64{16, 3}, RetAllow, RetAllow},
		{"socket(AF_VSOCK)", x, 41, []uint64{40, 1}, eafno, eafno},
		{"socket(AF_VSOCK) arm64", a, 198, []uint64{40, 1}, eafno, eafno},
		{"socket(AF_PACKET)", x, 41, []uint64{17, 3}, eafno, eafno},
		{"socket(AF_ALG)", x, 41, []uint64{38, 5}, eafno, eafno},
		{"socket(AF_VSOCK in the high word only is AF_UNIX)", x, 41, []uint64{40<<32 | 1}, RetAllow, RetAllow},
		{"socketpair(AF_UNIX)", x, 53, []uint64{1}, RetAllow, RetAllow},
		{"socketpair(AF_TIPC)", x, 53, []uint64{30}, eafno, eafno},
		{"chmod 0755", x, 90, []uint64{0, 0o755}, RetAllow, RetAllow},
		{"chmod 04755", x, 90, []uint64{0, 0o4755}, eperm, eperm},
		{"chmod 02755", x, 90, []uint64{0, 0o2755}, eperm, eperm},
		{"chmod 01777 (sticky)", x, 90, []uint64{0, 0o1777}, RetAllow, RetAllow},
		{"fchmod 06755", x, 91, []uint64{3, 0o6755}, eperm, eperm},
		{"fchmod 0644 arm64", a, 52, []uint64{3, 0o644}, RetAllow, RetAllow},
		{"fchmodat 04755", x, 268, []uint64{0, 0, 0o4755}, eperm, eperm},
		{"fchmodat 04755 arm64", a, 53, []uint64{0, 0, 0o4755}, eperm, eperm},
		{"fchmodat, set-id bits in another argument", x, 268, []uint64{0o4755, 0o4755, 0o755}, RetAllow, RetAllow},
		{"fchmodat2 02755", x, 452, []uint64{0, 0, 0o2755, 0}, eperm, eperm},
		{"fchmodat2 0700 arm64", a, 452, []uint64{0, 0, 0o700, 0}, RetAllow, RetAllow},
		{"open(O_RDONLY) whatever the mode register holds", x, 2, []uint64{0, 0, 0o4755}, RetAllow, RetAllow},
		{"open(O_CREAT, 0644)", x, 2, []uint64{0, 0x41, 0o644}, RetAllow, RetAllow},
		{"open(O_CREAT, 04755)", x, 2, []uint64{0, 0x41, 0o4755}, eperm, eperm},
		{"openat(O_CREAT|O_EXCL, 02755)", x, 257, []uint64{0, 0, 0xc1, 0o2755}, eperm, eperm},
		{"openat(O_TMPFILE, 04700) arm64", a, 56, []uint64{0, 0, 0x404002, 0o4700}, eperm, eperm},
		{"openat(O_RDWR, 0) arm64", a, 56, []uint64{0, 0, 2, 0}, RetAllow, RetAllow},
		{"openat(O_CREAT, 0600)", x, 257, []uint64{0, 0, 0x41, 0o600}, RetAllow, RetAllow},
		{"creat 04755", x, 85, []uint64{0, 0o4755}, eperm, eperm},
		{"creat 0644", x, 85, []uint64{0, 0o644}, RetAllow, RetAllow},
		{"mknod S_IFREG|04755", x, 133, []uint64{0, 0o104755}, eperm, eperm},
		{"mknodat S_IFIFO|0600 arm64", a, 33, []uint64{0, 0, 0o10600}, RetAllow, RetAllow},
		{"mknodat S_IFREG|02755", x, 259, []uint64{0, 0, 0o102755}, eperm, eperm},
		{"openat2 (its mode is out of the filter's reach)", x, 437, nil, enosys, enosys},
		{"x32 read", x, 0x40000000, nil, RetKill, RetKill},
		{"x32 keyctl", x, 0x40000000 | 250, nil, RetKill, RetKill},
		{"i386", 0x40000003, 1, nil, RetKill, RetKill},
		{"arm (32-bit)", 0x40000028, 1, nil, RetKill, RetKill},
		{"riscv64", 0xc00000f3, 1, nil, RetKill, RetKill},
		{"arm64 number of amd64 keyctl: none there", a, 250, nil, enosys, enosys},
		{"arm64 number of amd64 mount is getrusage", a, 165, nil, RetAllow, RetAllow},
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
	if n := len(strict); n > 1000 {
		t.Errorf("the program has %d instructions, far from the ~500 of its runs", n)
	}
	t.Logf("%d instructions (%d with AllowUserns)", len(strict), len(open))
}

// Every name of the policy is a call of x86_64 or arm64, in one list
// only: a typo or a name in two lists is a rule nobody meant.
func TestPolicyNames(t *testing.T) {
	known := map[string]bool{}
	for _, c := range numbers {
		known[c.name] = c.nr != [2]int16{-1, -1}
	}
	seen := map[string]string{}
	lists := map[string][]string{"allowed": fields(allowed), "refused": fields(refused), "nested": fields(nested)}
	for n := range checked() {
		lists["checked"] = append(lists["checked"], n)
	}
	for list, names := range lists {
		for _, n := range names {
			if other, ok := seen[n]; ok {
				t.Errorf("%s is in %s and %s", n, list, other)
			}
			seen[n] = list
			if !known[n] {
				t.Errorf("%s (%s): no such call on x86_64 or arm64", n, list)
			}
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

// TestSearchFindsEachRule: the binary search over the number runs gives
// every call number of both architectures the verdict of its own rule
// (each argument set below), and a number past the table ENOSYS.
func TestSearchFindsEachRule(t *testing.T) {
	argSets := [][]uint64{{}, {1}, {16}, {0x10000000}, {0x7e020000}, {0x5412}, {0, 0x5412}, {0x40, 0x800}, {0, 0, 0xc00},
		{0xffffffffffffffff, 0xffffffffffffffff, 0xffffffffffffffff, 0xffffffffffffffff}}
	for _, o := range []Options{{}, {AllowUserns: true}} {
		pol := policy(o)
		for col, a := range []uint32{ArchX86_64, ArchAArch64} {
			rules := archRules(pol, col)
			prog := append([]Insn{ld(offNr)}, arch(pol, col)...)
			for nr := 0; nr < len(rules)+64; nr++ {
				want := []Insn{ld(offNr), ret(RetErrno | enosys)}
				if nr < len(rules) {
					want = append([]Insn{ld(offNr)}, rules[nr].body()...)
				}
				for _, args := range argSets {
					if got, w := run(t, prog, a, int32(nr), args...), run(t, want, a, int32(nr), args...); got != w {
						t.Errorf("%+v, arch %#x, number %d, args %#x: the search returns %#x, the number's rule %#x", o, a, nr, args, got, w)
					}
				}
			}
		}
	}
}
