package native

import (
	"context"
	"deathwatch/supervisor"
	"deathwatch/supervisor/proc"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"deathwatch/shared/boxinit"
	"deathwatch/supervisor/exitcode"
)

// Start starts the box's init stage in new namespaces, moves it into the
// box cgroup, writes its uid map (unprivileged), sends it the settings
// and waits until it has exec'd the watcher (or says why it could not).
func (n *Native) Start(ctx context.Context, b *supervisor.Box) (*supervisor.Started, error) {
	// Made and started ahead by Create when it could be, else now.
	var l *launched
	var err error
	if pp := n.takePrep(b); pp != nil {
		<-pp.done
		l, err = pp.l, pp.err
	} else {
		l, err = n.prepareAndLaunch(b, nil, nil)
	}
	if err != nil {
		return nil, err
	}
	cmd, ctl, set, p := l.cmd, l.ctl, l.set, l.p
	root, cg := p.root, p.cg
	pid := cmd.Process.Pid
	fail := func(err error) (*supervisor.Started, error) {
		l.kill()
		return nil, err
	}
	// The init stage has its settings (launch sent them) and builds the
	// box while the supervisor records its init.
	deadline := l.t0.Add(n.opts.SetupTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	set.parent.SetDeadline(deadline)
	if b.State == nil {
		b.State = map[string]string{}
	}
	b.State[StateInitPID] = strconv.Itoa(pid)
	if st, err := proc.StartTime(pid); err == nil {
		b.State[StateInitStart] = strconv.FormatUint(st, 10)
	}
	n.writeRecord(b)
	// The init stage writes one line on failure; it closes the
	// descriptor once the box is built (an unprivileged box's on its
	// exec of the watcher), so EOF with nothing read means the watcher
	// runs.
	msg, err := io.ReadAll(io.LimitReader(set.parent, 4096))
	set.parent.Close()
	if err != nil {
		return fail(exitcode.Setup("wait for the box's init: %w", err))
	}
	if len(msg) > 0 {
		return fail(exitcode.Setup("set up native box %s: %s", b.Name, strings.TrimSpace(string(msg))))
	}
	if p.finishCgroup != nil {
		if err := p.finishCgroup(); err != nil {
			return fail(exitcode.Setup("set up native box %s: %w", b.Name, err))
		}
	}
	n.log.Debug("native box started", "box", b.Name, "pid", pid, "root", root, "network", b.Network,
		"clone", l.tClone, "setup", time.Since(l.t0)-l.tClone)
	var reaped atomic.Bool
	return &supervisor.Started{
		Control: ctl.parent,
		Wait: func() error {
			err := cmd.Wait()
			reaped.Store(true)
			n.setReaped(b.Name)
			go p.dropLive() // no one reads it any more: off the exit path
			return err
		},
		Kill: func() {
			// The watcher is PID 1 of the box: the kernel ends the whole
			// PID namespace with it, and PID 1 is reaped only once every
			// other process of the namespace is gone. Before that, the
			// cgroup kill covers the rest.
			if reaped.Load() {
				return
			}
			cmd.Process.Signal(syscall.SIGKILL)
			if cg != nil {
				cg.Kill()
			}
		},
	}, nil
}

// launched is a box's init stage, started: it waits for its settings.
type launched struct {
	p        *startPrep
	cmd      *exec.Cmd
	ctl, set sockPair // the parent ends (the children's are closed)
	t0       time.Time
	tClone   time.Duration
}

// kill ends a launched init stage that will not be given its settings.
func (l *launched) kill() {
	l.cmd.Process.Kill()
	l.cmd.Wait()
	l.ctl.parent.Close()
	l.set.parent.Close()
	l.p.dropLive()
}

// prepareAndLaunch makes b's startPrep and starts the init stage in new
// namespaces with it.
func (n *Native) prepareAndLaunch(b *supervisor.Box, plan *nsinitConfig, trees *aheadTrees) (*launched, error) {
	p, err := n.prepareStart(b, plan, trees)
	if err != nil {
		return nil, err
	}
	return n.launch(b, p)
}

// launch starts the init stage with p (and closes p's descriptors, which
// the stage inherits). The stage boots and waits for its settings.
func (n *Native) launch(b *supervisor.Box, p *startPrep) (*launched, error) {
	failed := true
	defer func() {
		if failed {
			p.close()
			p.dropLive()
		}
	}()
	ctl, set, devnull, err := openInitEnds()
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	cmd := initCmd(b, p, n.opts.Stderr, ctl.child, set.child, devnull)
	start := cmd.Start
	if len(p.cgTasks) > 0 {
		start = func() error { return startInCgroupV1(p.cgTasks, p.cgRoot, cmd.Start) }
	}
	t0 := time.Now()
	err = start()
	tClone := time.Since(t0)
	ctl.child.Close()
	set.child.Close()
	p.close() // the init stage holds its own copies
	if err != nil {
		ctl.parent.Close()
		set.parent.Close()
		if p.cgDir != nil {
			if cerr := checkCloneIntoSelf(p.cgSpec); cerr != nil {
				return nil, exitcode.Refused("start the box's init: %w: %w", cerr, err)
			}
		}
		return nil, namespaceError(err, p.rootless)
	}
	l := &launched{p: p, cmd: cmd, ctl: ctl, set: set, t0: t0, tClone: tClone}
	failed = false
	if err := n.settle(b, l); err != nil {
		l.kill()
		return nil, err
	}
	return l, nil
}

// openInitEnds makes what the init stage is started with besides p's
// descriptors: the control and settings socket pairs, and /dev/null for
// its stdin and stdout.
func openInitEnds() (ctl, set sockPair, devnull *os.File, err error) {
	if ctl, err = socketPair("control"); err != nil {
		return sockPair{}, sockPair{}, nil, exitcode.Setup("%w", err)
	}
	if set, err = socketPair("settings"); err != nil {
		ctl.close()
		return sockPair{}, sockPair{}, nil, exitcode.Setup("%w", err)
	}
	if devnull, err = os.Open(os.DevNull); err != nil {
		ctl.close()
		set.close()
		return sockPair{}, sockPair{}, nil, exitcode.Setup("open %s: %w", os.DevNull, err)
	}
	return ctl, set, devnull, nil
}

// initCmd is the init stage's command: the watcher binary in its init
// mode, cloned into the box's new namespaces with the descriptors 3
// (control), 4 (settings), 5 (kept free) and p's from 6.
func initCmd(b *supervisor.Box, p *startPrep, stderr io.Writer, ctl, set, devnull *os.File) *exec.Cmd {
	cmd := &exec.Cmd{
		Path:       initPath(b, p),
		Args:       append(append([]string(nil), p.cfg.Argv...), boxinit.Arg),
		Env:        p.cfg.Env,
		Stdin:      devnull,
		Stdout:     devnull,
		Stderr:     stderr,
		ExtraFiles: append([]*os.File{ctl, set, nil}, p.extra...), // fds 3, 4, (5), 6...
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: nativeCloneFlags(b.Network, true),
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if !p.rootless {
		// Written by the clone's parent before the init stage execs, and
		// the stage execs as the box's root (host id idStart): it holds
		// every capability in the box's namespaces and none outside.
		m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(p.idStart), Size: IDRangeSize}}
		cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = m, m
		cmd.SysProcAttr.GidMappingsEnableSetgroups = true // the watcher clears the agent's groups
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	}
	if p.cgDir != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(p.cgDir.Fd())
	}
	if len(p.cgTasks) > 0 {
		cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWCGROUP
	}
	return cmd
}

// initPath is the watcher binary the init stage runs, and then PID 1 of
// the box in the same process. As root it runs from the read-only
// detached tree of its bind mount (what the box sees at
// boxWatcherPath), so that the box's PID 1 is never a file of a
// writable host mount.
func initPath(b *supervisor.Box, p *startPrep) string {
	self := b.WatcherPath
	for _, op := range p.cfg.Ops {
		if op.Target == boxWatcherPath && op.TreeFD > 0 {
			self = "/proc/self/fd/" + strconv.Itoa(op.TreeFD) // the child's descriptor, resolved by its execve
		}
	}
	return self
}

// settle finishes a cloned init stage before it runs anything: an
// unprivileged box's id maps and process limit, the id slot's record of
// the init, and the settings.
func (n *Native) settle(b *supervisor.Box, l *launched) error {
	p, pid := l.p, l.cmd.Process.Pid
	if p.rootless {
		if err := mapUnprivileged(b, p, pid); err != nil {
			return err
		}
	}
	// The slot names its init before the init runs anything: a slot is
	// taken back only once both the supervisor and the init are gone.
	if err := p.ids.Started(b.Name, p.idStart, pid); err != nil {
		return exitcode.Setup("record the box's init in its id slot: %w", err)
	}
	// The settings go at once: the stage builds the box's file system
	// (inside its own namespaces: nothing of it is on the host) while
	// the caller journals the box as created, and Start waits for the
	// outcome. They fit the socket's buffer, so the write does not wait
	// for the stage.
	l.set.parent.SetWriteDeadline(l.t0.Add(n.opts.SetupTimeout))
	if _, err := l.set.parent.Write(boxinit.WriteSettings(p.cfg.Marshal())); err != nil {
		return exitcode.Setup("send settings to the box's init: %w", err)
	}
	return nil
}

// mapUnprivileged writes an unprivileged box's id maps (newuidmap) and,
// for a box without a cgroup, its process limit.
func mapUnprivileged(b *supervisor.Box, p *startPrep, pid int) error {
	agentUID, agentGID := agentIDs(b)
	uids, gids := rootlessMaps(p.ids, p.idStart, os.Geteuid(), os.Getegid(), agentUID, agentGID)
	if err := writeIDMaps(context.Background(), pid, uids, gids); err != nil {
		return exitcode.Setup("%w", err)
	}
	if b.State[StateCgroup] == "" {
		// No cgroup, so no pids.max: the agent's and the watcher's
		// host ids are the box's alone, so a process limit per uid
		// (inherited by everything the init starts) is one per box.
		lim := unix.Rlimit{Cur: DefaultPidsLimit, Max: DefaultPidsLimit}
		if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &lim, nil); err != nil {
			return exitcode.Setup("limit the box's processes: %w", os.NewSyscallError("prlimit(RLIMIT_NPROC)", err))
		}
	}
	return nil
}

// namespaceError turns a failed clone into one line a person can act on.
func namespaceError(err error, userns bool) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EINVAL) {
		why := "the kernel refused to create the namespaces"
		if userns {
			if w := userNamespacesForbidden(); w != "" {
				why = w
			} else {
				why += " (unprivileged user namespaces may be restricted here)"
			}
		}
		return exitcode.Refused("no permission for namespaces: %s: %w", why, errors.Unwrap(err))
	}
	return exitcode.Setup("start the box's init: %w", err)
}

// writeIDMaps writes the box's uid and gid maps (see
// rootlessMaps) through the setuid helpers.
func writeIDMaps(ctx context.Context, pid int, uids, gids []idTriple) error {
	for _, m := range []struct {
		tool string
		m    []idTriple
	}{{"newuidmap", uids}, {"newgidmap", gids}} {
		tool, err := exec.LookPath(m.tool)
		if err != nil {
			return fmt.Errorf("%s is not installed (package uidmap); an unprivileged supervisor needs it to map the agent's uid", m.tool)
		}
		args := idmapArgs(m.tool, pid, m.m)
		cmd := exec.CommandContext(ctx, tool, args[1:]...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

type sockPair struct{ parent, child *os.File }

func (p sockPair) close() { p.parent.Close(); p.child.Close() }

// socketPair makes a connected pair, both ends close-on-exec; the
// parent's end is non-blocking (for deadlines), the child's blocking.
func socketPair(name string) (sockPair, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return sockPair{}, fmt.Errorf("%s socketpair: %w", name, os.NewSyscallError("socketpair", err))
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return sockPair{}, os.NewSyscallError("set non-blocking", err)
	}
	return sockPair{parent: os.NewFile(uintptr(fds[0]), name), child: os.NewFile(uintptr(fds[1]), name+"-box")}, nil
}

// idmapArgs is the argv of newuidmap/newgidmap that writes map m for
// the process pid.
func idmapArgs(tool string, pid int, m []idTriple) []string {
	args := []string{tool, strconv.Itoa(pid)}
	for _, t := range m {
		args = append(args, strconv.FormatInt(t.box, 10), strconv.FormatInt(t.host, 10), strconv.FormatInt(t.count, 10))
	}
	return args
}

// nativeCloneFlags are the namespaces of a box.
func nativeCloneFlags(network string, userns bool) uintptr {
	f := uintptr(unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if network != "host" {
		f |= unix.CLONE_NEWNET
	}
	if userns {
		f |= unix.CLONE_NEWUSER
	}
	return f
}
