// Package seccomp builds the syscall filter every box's agent runs
// under: a classic BPF program for seccomp(SECCOMP_SET_MODE_FILTER)
// that allows what syscalls.go lists (Docker's default profile for a
// process without capabilities, less what we refuse beyond it) and
// refuses everything else. The supervisor compiles it and sends it in
// the launch spec; the watcher only installs it, so the PID-1 binary
// carries no filter compiler.
//
// One program serves x86_64 and arm64: it branches on
// seccomp_data.arch, whatever host built it. Any other architecture,
// and the x32 ABI, kills the process. The package is pure Go with no
// dependency, so it builds for the supervisor on every host.
package seccomp

//go:generate go run gen_table.go

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
)

// Insn is one classic BPF instruction (struct sock_filter).
type Insn struct {
	Code   uint16
	Jt, Jf uint8
	K      uint32
}

// MaxInsns is the kernel's limit on one program (BPF_MAXINSNS).
const MaxInsns = 4096

// Classic BPF opcodes and seccomp values, from linux/filter.h,
// linux/bpf_common.h, linux/seccomp.h and linux/audit.h.
const (
	ldAbsW   = 0x20 // BPF_LD | BPF_W | BPF_ABS
	jeqK     = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	jgeK     = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	jsetK    = 0x45 // BPF_JMP | BPF_JSET | BPF_K
	retK     = 0x06 // BPF_RET | BPF_K
	RetKill  = 0x80000000
	RetErrno = 0x00050000
	RetAllow = 0x7fff0000

	ArchX86_64  = 0xc000003e
	ArchAArch64 = 0xc00000b7

	offNr   = 0  // seccomp_data.nr
	offArch = 4  // seccomp_data.arch
	offArg0 = 16 // seccomp_data.args[0], low word (both arches are little-endian)

	x32Bit       = 0x40000000 // __X32_SYSCALL_BIT
	setID        = 0o6000     // S_ISUID | S_ISGID
	oCreat       = 0x40       // O_CREAT (x86_64 and arm64)
	oTmpfile     = 0x400000   // __O_TMPFILE (x86_64 and arm64)
	eperm        = 1
	enosys       = 38
	eafnosupport = 97
)

// Options are what a spec may change in the filter.
type Options struct {
	// AllowUserns lets the agent make nested user namespaces, and with
	// them the calls that only work inside one (syscalls.go's nested).
	AllowUserns bool
}

// verb is what the filter does with a call.
type verb uint8

const (
	absent        verb = iota // ENOSYS
	allow                     // as it is
	refuse                    // EPERM
	noNamespace               // EPERM when args[0] has a namespace flag (clone, unshare)
	personality               // EPERM unless args[0] is one of personas
	families                  // EAFNOSUPPORT unless args[0] is one of boxFamilies
	noSetID                   // EPERM when args[arg] has S_ISUID or S_ISGID (the chmod family, mknod)
	noSetIDCreate             // EPERM when args[flags] creates a file and args[arg] has S_ISUID or S_ISGID (open)
)

// rule is a verb and the arguments it reads.
type rule struct {
	do         verb
	arg, flags uint8
}

// policy is every named call's rule for o.
func policy(o Options) map[string]rule {
	p := map[string]rule{}
	for _, n := range fields(allowed) {
		p[n] = rule{do: allow}
	}
	for _, n := range fields(refused) {
		p[n] = rule{do: refuse}
	}
	for _, n := range fields(nested) {
		switch {
		case o.AllowUserns:
			p[n] = rule{do: allow}
		case n == "clone" || n == "unshare":
			p[n] = rule{do: noNamespace}
		case n == "clone3":
			// Its flags sit in memory the filter cannot read: ENOSYS makes
			// the C library fall back to clone, whose flags it can.
			p[n] = rule{do: absent}
		default:
			p[n] = rule{do: refuse}
		}
	}
	for n, r := range checked() {
		p[n] = r
	}
	return p
}

// Program is the filter for o.
func Program(o Options) []Insn {
	pol := policy(o)
	p := []Insn{
		ld(offArch),
		jump(jeqK, ArchX86_64, 1, 0),
		jump(jumpAlways, 0, 0, 0), // patched: to arm64
	}
	// x86_64: x32 calls (the same numbers with bit 30 set) kill.
	p = append(p, ld(offNr), jump(jgeK, x32Bit, 0, 1), ret(RetKill))
	p = append(p, arch(pol, 0)...)
	arm := len(p)
	p[2].K = uint32(arm - 3)
	p = append(p, jump(jeqK, ArchAArch64, 1, 0), ret(RetKill), ld(offNr))
	return append(p, arch(pol, 1)...)
}

// jumpAlways is BPF_JMP | BPF_JA.
const jumpAlways = 0x05

// arch is the policy for one architecture (its column in numbers),
// with the syscall number in A on entry: the numbers in ascending runs
// of one rule, past the last one ENOSYS, found by a binary search on
// the runs' first numbers (a few comparisons for any call, where a scan
// of the runs took up to one per run: the kernel runs the filter for
// every call it cannot answer from its cache, and for every number when
// the filter is installed, to fill that cache). Every rule's body
// returns.
func arch(pol map[string]rule, col int) []Insn {
	rules := archRules(pol, col)
	var runs []numRun
	for lo := 0; lo < len(rules); {
		hi := lo
		for hi+1 < len(rules) && rules[hi+1] == rules[lo] {
			hi++
		}
		runs = append(runs, numRun{first: uint32(lo), body: rules[lo].body()})
		lo = hi + 1
	}
	runs = append(runs, numRun{first: uint32(len(rules)), body: []Insn{ret(RetErrno | enosys)}})
	return search(runs)
}

// archRules is the rule of each number of one architecture (its column
// in numbers), up to the highest named: absent where no call is named.
func archRules(pol map[string]rule, col int) []rule {
	var rules []rule
	for _, c := range numbers {
		r, ok := pol[c.name]
		n := int(c.nr[col])
		if !ok || n < 0 {
			continue
		}
		for len(rules) <= n {
			rules = append(rules, rule{do: absent})
		}
		rules[n] = r
	}
	return rules
}

// numRun is a range of numbers that share one rule: from first up to the
// next run's first.
type numRun struct {
	first uint32
	body  []Insn
}

// search is the binary search over runs (sorted, the first starting at
// 0), entered with the number in A: each step compares A with the
// middle run's first number and goes on in one half.
func search(runs []numRun) []Insn {
	if len(runs) == 1 {
		return runs[0].body
	}
	mid := len(runs) / 2
	below, above := search(runs[:mid]), search(runs[mid:])
	// A >= first: the next instruction jumps over the lower half; else
	// skip it into the lower half.
	p := []Insn{jump(jgeK, runs[mid].first, 0, 1), jump(jumpAlways, uint32(len(below)), 0, 0)}
	p = append(p, below...)
	return append(p, above...)
}

// body is the instructions of r, entered with the number in A.
func (r rule) body() []Insn {
	switch r.do {
	case allow:
		return []Insn{ret(RetAllow)}
	case refuse:
		return []Insn{ret(RetErrno | eperm)}
	case noNamespace:
		return []Insn{ld(offArg0), jump(jsetK, namespaceFlags, 0, 1), ret(RetErrno | eperm), ret(RetAllow)}
	case personality:
		return oneOf(personas, RetErrno|eperm)
	case families:
		return oneOf(boxFamilies, RetErrno|eafnosupport)
	case noSetID:
		return []Insn{ld(argOff(r.arg)), jump(jsetK, setID, 0, 1), ret(RetErrno | eperm), ret(RetAllow)}
	case noSetIDCreate:
		return []Insn{
			ld(argOff(r.flags)), jump(jsetK, oCreat|oTmpfile, 0, 3),
			ld(argOff(r.arg)), jump(jsetK, setID, 0, 1),
			ret(RetErrno | eperm), ret(RetAllow),
		}
	}
	return []Insn{ret(RetErrno | enosys)}
}

// argOff is the offset of args[i]'s low word in seccomp_data.
func argOff(i uint8) uint32 { return offArg0 + 8*uint32(i) }

// oneOf allows a call whose args[0] is one of vs and returns otherwise.
func oneOf(vs []uint32, otherwise uint32) []Insn {
	p := []Insn{ld(offArg0)}
	for i, v := range vs {
		p = append(p, jump(jeqK, v, uint8(len(vs)-i), 0))
	}
	return append(p, ret(otherwise), ret(RetAllow))
}

// fields are the names in a list of syscalls.go.
func fields(s string) []string { return strings.Fields(s) }

// call is one syscall's numbers on x86_64 and arm64 (-1: none there).
type call struct {
	name string
	nr   [2]int16
}

func ld(off uint32) Insn                            { return Insn{Code: ldAbsW, K: off} }
func ret(k uint32) Insn                             { return Insn{Code: retK, K: k} }
func jump(code uint16, k uint32, jt, jf uint8) Insn { return Insn{Code: code, Jt: jt, Jf: jf, K: k} }

// Default is the encoded filter a spec carries for every box: Program's,
// compiled ahead by go generate into table.go, so a launch only copies it.
func Default(allowUserns bool) []byte {
	if allowUserns {
		return []byte(tableUserns)
	}
	return []byte(tableDeny)
}

// Marshal encodes a program for the spec: 8 bytes per instruction,
// little-endian code, jt, jf, k.
func Marshal(p []Insn) []byte {
	b := make([]byte, 0, 8*len(p))
	for _, in := range p {
		b = binary.LittleEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.LittleEndian.AppendUint32(b, in.K)
	}
	return b
}

// Unmarshal decodes what Marshal made. The kernel checks the program
// itself when it is installed.
func Unmarshal(b []byte) ([]Insn, error) {
	if err := Check(b); err != nil {
		return nil, err
	}
	p := make([]Insn, len(b)/8)
	for i := range p {
		c := b[8*i:]
		p[i] = Insn{Code: binary.LittleEndian.Uint16(c), Jt: c[2], Jf: c[3], K: binary.LittleEndian.Uint32(c[4:])}
	}
	return p, nil
}

// Check reports whether b can be an encoded program.
func Check(b []byte) error {
	switch n := len(b); {
	case n == 0:
		return errors.New("empty program")
	case n%8 != 0:
		return errors.New(strconv.Itoa(n) + " bytes are not whole instructions of 8 bytes")
	case n/8 > MaxInsns:
		return errors.New(strconv.Itoa(n/8) + " instructions exceed the kernel's limit of " + strconv.Itoa(MaxInsns))
	}
	return nil
}
