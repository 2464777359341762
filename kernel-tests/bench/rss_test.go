package bench

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// memory is what /proc/PID/status says of one process, in KiB.
type memory struct {
	RSS, Anon, File, Shmem int64
	PSS                    int64 // proportional: shared file pages divided among their mappers
	USS                    int64 // unique: the pages no other process maps (Private_Clean + Private_Dirty)
	Threads                int64
	Maps                   residentMaps
}

// residentMaps splits the resident KiB by mapping (/proc/PID/smaps):
// the init's own binary by permission (r-x text; r-- rodata and, for a
// Go binary, its pclntab; rw- data), the largest anonymous mapping (a
// Go init's heap arena: objects and goroutine and thread stacks), and
// the rest (bss, the runtime's off-heap metadata, the main stack).
type residentMaps struct {
	Text, ROData, Data, Largest, OtherAnon int64
}

func readResidentMaps(pid int) (residentMaps, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return residentMaps{}, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return residentMaps{}, err
	}
	var m residentMaps
	var perm, path string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			perm, path = f[1], ""
			if len(f) >= 6 {
				path = f[5]
			}
		case len(f) >= 2 && f[0] == "Rss:":
			kib, _ := strconv.ParseInt(f[1], 10, 64)
			switch {
			case path == exe && strings.HasPrefix(perm, "r-x"):
				m.Text += kib
			case path == exe && strings.HasPrefix(perm, "r--"):
				m.ROData += kib
			case path == exe:
				m.Data += kib
			case path != "" && path != "[heap]" && path != "[stack]":
				// Another file (a dynamic init's libraries), the vdso.
			case path == "" && kib > m.Largest:
				m.OtherAnon += m.Largest
				m.Largest = kib
			default:
				m.OtherAnon += kib
			}
		}
	}
	return m, nil
}

func readMemory(pid int) (memory, error) {
	st, err := ktest.Status(pid)
	if err != nil {
		return memory{}, fmt.Errorf("read /proc/%d/status: %w", pid, err)
	}
	kib := func(field string) int64 {
		n, _ := strconv.ParseInt(strings.TrimSuffix(st[field], " kB"), 10, 64)
		return n
	}
	m := memory{RSS: kib("VmRSS"), Anon: kib("RssAnon"), File: kib("RssFile"), Shmem: kib("RssShmem"), Threads: kib("Threads")}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
		roll := ktest.ParseStatus(string(b))
		field := func(k string) int64 { n, _ := strconv.ParseInt(strings.TrimSuffix(roll[k], " kB"), 10, 64); return n }
		m.PSS, m.USS = field("Pss"), field("Private_Clean")+field("Private_Dirty")
	}
	if m.RSS == 0 {
		return memory{}, fmt.Errorf("/proc/%d/status has no VmRSS (a kernel thread or a zombie?)", pid)
	}
	if m.Maps, err = readResidentMaps(pid); err != nil {
		return memory{}, fmt.Errorf("/proc/%d/smaps: %w", pid, err)
	}
	return m, nil
}

// idleDelay is how long an init runs before its memory is read.
const idleDelay = 300 * time.Millisecond

// plainRSS starts `unshare --pid --fork ARGV` (ARGV an init running a
// sleep), reads the init's memory after idleDelay, and kills the box.
func plainRSS(t *testing.T, argv []string) memory {
	t.Helper()
	cmd := exec.Command("unshare", append([]string{"--pid", "--fork"}, argv...)...)
	cmd.Env = ktest.WatcherEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	var init int
	if !ktest.WaitFor(5*time.Second, func() bool {
		for _, p := range ktest.Descendants(cmd.Process.Pid) {
			if st, err := ktest.ReadStat(p.PID); err == nil && st.PPID == cmd.Process.Pid {
				init = p.PID
				return true
			}
		}
		return false
	}) {
		t.Fatalf("%v: no init below unshare after 5s", argv)
	}
	time.Sleep(idleDelay)
	m, err := readMemory(init)
	if err != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	// The init's exit ends the namespace and its sleep; SIGKILL from the
	// parent namespace always reaches a namespace's PID 1.
	_ = syscall.Kill(init, syscall.SIGKILL)
	return m
}

// controlRSS runs the watcher in control mode (--control=fd:3, PID 1)
// with a spec running sleep and reads its memory after idleDelay.
func controlRSS(t *testing.T, w string) memory {
	t.Helper()
	c := ktest.StartController(t, w, ktest.Options{Control: ktest.ControlFD, PID1: true})
	c.Launch(shared.Spec{
		Argv: []string{"/bin/busybox", "sleep", "5"}, Env: []string{"PATH=/usr/bin:/bin"},
		UID: shared.DefaultAgentUID, GID: shared.DefaultAgentGID, Grace: time.Second,
	})
	ns := c.BoxNamespace(5 * time.Second)
	init, err := ktest.BoxInit(ns)
	if err != nil {
		t.Fatalf("control mode: %v\n%s", err, c.Diagnostics())
	}
	time.Sleep(idleDelay)
	m, err := readMemory(init.PID)
	if err != nil {
		t.Fatalf("control mode: %v", err)
	}
	_ = c.CloseWrite() // EOF: the watcher kills the box and exits
	c.Wait(10 * time.Second)
	return m
}

// TestBenchIdleRSS: resident memory of each init as PID 1 with one
// sleeping child.
func TestBenchIdleRSS(t *testing.T) {
	requireBench(t)
	ktest.RequireCmd(t, "unshare")
	catatonit := ktest.RequireCmd(t, "catatonit")
	dumbInit := ktest.RequireCmd(t, "dumb-init")
	ktest.RequireCmd(t, tiniStatic)
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Fatalf("/bin/busybox: %v (install busybox-static; kernel-tests/provision.sh does)", err)
	}
	w := ktest.Build(t).Watcher
	g := goinitBin(t)
	const trials = 5
	type init struct {
		name string
		argv []string // nil: control mode, the watcher bin
		bin  string
		mem  []memory
	}
	inits := []*init{
		{name: "tini-static", argv: []string{tiniStatic, "--", "/bin/sleep", "5"}},
		{name: "catatonit", argv: []string{catatonit, "--", "/bin/sleep", "5"}},
		{name: "dumb-init", argv: []string{dumbInit, "/bin/sleep", "5"}},
		{name: "goinit fork (Go floor)", argv: []string{g, "fork", "/bin/sleep", "5"}},
		{name: "watcher (plain)", argv: []string{w, "--", "/bin/sleep", "5"}},
		{name: "watcher (--control=fd:3)", bin: w},
	}
	wbase := baselineBinary(t, watcherBaselineEnv, "watcher")
	if b := wbase; b != "" {
		inits = append(inits, &init{name: "watcher (baseline, plain)", argv: []string{b, "--", "/bin/sleep", "5"}}, &init{name: "watcher (baseline, --control=fd:3)", bin: b})
	}
	s := newSection(t, rankRSS, fmt.Sprintf("idle memory as PID 1 with a sleeping child, read after %s (median of %d)", idleDelay, trials),
		"init", "VmRSS", "RssAnon", "RssFile", "Pss", "USS", "threads", "binary r-x", "binary r--", "binary rw-", "largest anon map", "other anon")
	for i := 0; i < trials; i++ {
		for _, in := range inits {
			if in.argv == nil {
				in.mem = append(in.mem, controlRSS(t, in.bin))
			} else {
				in.mem = append(in.mem, plainRSS(t, in.argv))
			}
		}
	}
	med := func(ms []memory, f func(memory) int64) int64 {
		v := make([]int64, len(ms))
		for i, m := range ms {
			v[i] = f(m)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	kib := func(n int64) string { return fmt.Sprintf("%.2f MiB", float64(n)/1024) }
	for _, in := range inits {
		rss := med(in.mem, func(m memory) int64 { return m.RSS })
		anon := med(in.mem, func(m memory) int64 { return m.Anon })
		file := med(in.mem, func(m memory) int64 { return m.File })
		pss := med(in.mem, func(m memory) int64 { return m.PSS })
		uss := med(in.mem, func(m memory) int64 { return m.USS })
		thr := med(in.mem, func(m memory) int64 { return m.Threads })
		split := func(f func(residentMaps) int64) string {
			return kib(med(in.mem, func(m memory) int64 { return f(m.Maps) }))
		}
		s.Row(in.name, kib(rss), kib(anon), kib(file), kib(pss), kib(uss), strconv.FormatInt(thr, 10),
			split(func(m residentMaps) int64 { return m.Text }), split(func(m residentMaps) int64 { return m.ROData }),
			split(func(m residentMaps) int64 { return m.Data }), split(func(m residentMaps) int64 { return m.Largest }),
			split(func(m residentMaps) int64 { return m.OtherAnon }))
		s.Set(in.name, map[string]any{"vmrss_kib": rss, "rss_anon_kib": anon, "rss_file_kib": file, "pss_kib": pss, "uss_kib": uss, "threads": thr, "trials": in.mem})
		if strings.HasPrefix(in.name, "watcher") && !strings.Contains(in.name, "baseline") {
			s.Target("idle VmRSS, "+in.name, float64(rss)/1024, 2.5, "MiB")
		}
	}
	s.Note("goinit fork is the least a static Go init costs (the runtime's own heap, stacks and threads; a smaller binary, so less RssFile): the watcher's RssAnon above its RssAnon is what the watcher itself holds")
	if wbase != "" {
		s.Note("watcher (baseline) is %s", wbase)
	}
	s.Note("by mapping (smaps Rss, each column its own median): the binary's r-x (text), r-- (rodata; a Go binary's pclntab too) and rw- (data) mappings; the largest anonymous mapping (a Go init's heap arena: objects, goroutine and thread stacks); the rest (bss, off-heap runtime metadata, the main stack). A small binary is resident in whole once it runs (fault-around maps the page cache's folios): its RssFile is its size, so a byte less of binary is a byte less per box")
	s.Note("RssFile is the init's own binary as mapped from the page cache (shared between boxes that run the same file); RssAnon is its private memory; Pss divides shared pages among their mappers; USS is what only this init maps (Private_Clean + Private_Dirty: what its end would free; the binary's pages leave USS as soon as a second box runs the same file)")
	s.Log()
}
