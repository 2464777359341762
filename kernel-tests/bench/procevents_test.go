package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's process events connector (linux/cn_proc.h) reports every
// fork, exec and exit with a CLOCK_MONOTONIC timestamp taken in the
// kernel: the launch timeline reads where an init spends its time from
// outside, the same way for tini and the watcher, without tracing either.

const (
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1
	procCnMcastIgnore = 2

	procEventFork = 0x00000001
	procEventExec = 0x00000002
	procEventComm = 0x00000200 // a thread's name changed (prctl PR_SET_NAME)
	procEventExit = 0x80000000
)

// procEvent is one fork, exec, name change or exit.
type procEvent struct {
	what uint32
	at   time.Duration // CLOCK_MONOTONIC
	// fork: parent pid/tgid, child pid/tgid; exec, comm, exit: pid/tgid.
	pid, tgid           int
	childPID, childTGID int
}

// procEvents listens to the connector and keeps what it hears.
type procEvents struct {
	fd int

	mu       sync.Mutex
	events   []procEvent
	overflow int // ENOBUFS: events were lost
	closed   bool
	done     chan struct{}
}

func openProcEvents() (*procEvents, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("open the process events connector: %w", err)
	}
	// Other work on the machine forks too: room for bursts.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind the process events connector: %w", err)
	}
	if err := sendProcOp(fd, procCnMcastListen); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen to process events (a kernel without CONFIG_PROC_EVENTS?): %w", err)
	}
	p := &procEvents{fd: fd, done: make(chan struct{})}
	go p.read()
	return p, nil
}

// sendProcOp sends a cn_msg carrying op to the process events connector.
func sendProcOp(fd int, op uint32) error {
	le := binary.LittleEndian
	msg := make([]byte, unix.NLMSG_HDRLEN+20+4)
	le.PutUint32(msg[0:], uint32(len(msg)))
	le.PutUint16(msg[4:], unix.NLMSG_DONE)
	le.PutUint32(msg[12:], uint32(os.Getpid()))
	le.PutUint32(msg[16:], cnIdxProc)
	le.PutUint32(msg[20:], cnValProc)
	le.PutUint16(msg[32:], 4) // cn_msg.len
	le.PutUint32(msg[36:], op)
	return unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

func (p *procEvents) read() {
	defer close(p.done)
	le := binary.LittleEndian
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(p.fd, buf, 0)
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return
		}
		if errors.Is(err, unix.ENOBUFS) {
			p.mu.Lock()
			p.overflow++
			p.mu.Unlock()
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		for b := buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			l := int(le.Uint32(b[0:]))
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				break
			}
			// nlmsghdr (16) + cn_msg (20) + proc_event: what, cpu,
			// timestamp_ns, then the event's data.
			if ev := b[unix.NLMSG_HDRLEN+20 : l]; len(ev) >= 40 {
				e := procEvent{what: le.Uint32(ev[0:]), at: time.Duration(le.Uint64(ev[8:]))}
				d := ev[16:]
				u := func(i int) int { return int(le.Uint32(d[4*i:])) }
				switch e.what {
				case procEventFork:
					e.pid, e.tgid, e.childPID, e.childTGID = u(0), u(1), u(2), u(3)
				case procEventExec, procEventExit, procEventComm:
					e.pid, e.tgid = u(0), u(1)
				default:
					e.what = 0
				}
				if e.what != 0 {
					p.mu.Lock()
					p.events = append(p.events, e)
					p.mu.Unlock()
				}
			}
			b = b[(l+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1):]
		}
	}
}

// reset forgets what was heard so far.
func (p *procEvents) reset() (overflowed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	overflowed = p.overflow > 0
	p.events, p.overflow = p.events[:0], 0
	return overflowed
}

// waitExit waits until the exit of process tgid was heard and returns
// the events so far.
func (p *procEvents) waitExit(tgid int, timeout time.Duration) ([]procEvent, bool) {
	end := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		for _, e := range p.events {
			if e.what == procEventExit && e.pid == tgid && e.tgid == tgid {
				evs := append([]procEvent(nil), p.events...)
				p.mu.Unlock()
				return evs, true
			}
		}
		p.mu.Unlock()
		if time.Now().After(end) {
			return nil, false
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (p *procEvents) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = sendProcOp(p.fd, procCnMcastIgnore)
	// Wake the reader with one more event of our own.
	_ = unix.Shutdown(p.fd, unix.SHUT_RDWR)
	unix.Close(p.fd)
	select {
	case <-p.done:
	case <-time.After(time.Second):
	}
}

// launchTimeline is one `unshare --pid --fork INIT -- AGENT` as the
// connector saw it.
type launchTimeline struct {
	initExec, agentFork, agentExec, agentExit, initExit time.Duration
	threadsBefore, threads                              int // threads the init made before forking the agent, and in all
}

// timeline picks the init (unshare's child) and the agent (the init's
// first child process) out of the events below root; without an agent
// (a bare command under unshare) only the init's exec and exit.
func timeline(evs []procEvent, root int, withAgent bool) (launchTimeline, error) {
	var tl launchTimeline
	init, agent := 0, 0
	for _, e := range evs {
		switch {
		case e.what == procEventFork && init != 0 && e.childTGID == init && e.childPID != init:
			// A thread: the kernel names the process's parent as its
			// parent, and the init as its thread group.
			tl.threads++
			if agent == 0 {
				tl.threadsBefore++
			}
		case e.what == procEventFork && e.tgid == root && e.childPID == e.childTGID && init == 0:
			init = e.childTGID
		case e.what == procEventFork && init != 0 && e.tgid == init && e.childPID == e.childTGID && agent == 0:
			agent, tl.agentFork = e.childTGID, e.at
		case e.what == procEventExec && init != 0 && e.pid == init && tl.initExec == 0:
			tl.initExec = e.at
		case e.what == procEventExec && agent != 0 && e.pid == agent && tl.agentExec == 0:
			tl.agentExec = e.at
		case e.what == procEventExit && agent != 0 && e.pid == agent && e.tgid == agent:
			tl.agentExit = e.at
		case e.what == procEventExit && init != 0 && e.tgid == init:
			// The init is gone when its last thread is.
			tl.initExit = max(tl.initExit, e.at)
		}
	}
	switch {
	case init == 0 || tl.initExec == 0 || tl.initExit == 0:
		return tl, fmt.Errorf("no exec and exit of unshare's child among %d events", len(evs))
	case withAgent && (agent == 0 || tl.agentExec == 0 || tl.agentExit == 0):
		return tl, fmt.Errorf("no fork, exec and exit of the agent below init %d", init)
	}
	return tl, nil
}
