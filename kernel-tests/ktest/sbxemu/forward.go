package main

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// initMain is the sandbox's own PID 1: it reaps and idles, and exits on
// SIGTERM/SIGINT. It is not the caller's program, as a microVM's init
// is not: whatever `sbx exec` starts runs beside it.
func initMain() int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return 0
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
	return 0
}

// forwarder is one running sandbox's only way out: listeners inside the
// sandbox's network namespace on host.docker.internal, dialing the
// host's loopback from the host's namespace while a rule allows it.
type forwarder struct {
	e       *emu
	name    string
	pid     int // the sandbox's init, host pid
	netns   *os.File
	listen  chan listenReq // served by the goroutine inside the sandbox's netns
	mu      sync.Mutex
	ports   map[int]net.Listener
	logger  *log.Logger
	nsInode uint64
}

type listenReq struct {
	port  int
	reply chan error
}

// forwardMain is `sbx __forward STATE NAME PID`.
func forwardMain(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: __forward STATE NAME PID")
		return 2
	}
	pid, _ := strconv.Atoi(args[2])
	m, err := readMode()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	f := &forwarder{e: &emu{state: args[0], mode: m}, name: args[1], pid: pid, ports: map[int]net.Listener{},
		listen: make(chan listenReq), logger: log.New(os.Stderr, "forwarder "+args[1]+": ", log.LstdFlags|log.Lmicroseconds)}
	if err := f.run(); err != nil {
		f.logger.Print(err)
		return 1
	}
	return 0
}

func (f *forwarder) run() error {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", f.pid))
	if err != nil {
		return fmt.Errorf("open the sandbox's network namespace: %w", err)
	}
	f.netns = ns
	var st unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &st); err != nil {
		return err
	}
	f.nsInode = st.Ino
	ready := make(chan error, 1)
	go f.inSandboxNetns(ready)
	if err := <-ready; err != nil {
		return err
	}
	if err := f.sync(); err != nil {
		return err
	}
	sock := f.e.sockPath(f.name)
	os.Remove(sock)
	ctl, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	go f.control(ctl)
	f.logger.Printf("up (sandbox init pid %d)", f.pid)
	// Die with the sandbox, with its record, and with the state folder
	// (the test that made it is over); stop the sandbox when it is idle.
	lastBusy := time.Now()
	for range time.Tick(100 * time.Millisecond) {
		if !f.sandboxAlive() {
			f.logger.Print("sandbox gone; exiting")
			return nil
		}
		if f.idleStop(&lastBusy) {
			return nil
		}
	}
	return nil
}

func (f *forwarder) sandboxAlive() bool {
	if _, err := os.Stat(f.e.path("sandboxes", f.name+".json")); err != nil {
		return false
	}
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", f.pid), &st); err != nil || st.Ino != f.nsInode {
		return false
	}
	return true
}

// inSandboxNetns locks its thread, enters the sandbox's network
// namespace and serves listen requests there for good: the thread is
// never unlocked, so the Go runtime discards it when the goroutine ends
// and no other goroutine ever runs in that namespace.
func (f *forwarder) inSandboxNetns(ready chan<- error) {
	runtime.LockOSThread()
	if err := unix.Setns(int(f.netns.Fd()), unix.CLONE_NEWNET); err != nil {
		ready <- os.NewSyscallError("setns(CLONE_NEWNET)", err)
		return
	}
	ready <- nil
	for req := range f.listen {
		l, err := net.Listen("tcp4", net.JoinHostPort(hostAlias, strconv.Itoa(req.port)))
		if err == nil {
			f.mu.Lock()
			f.ports[req.port] = l
			f.mu.Unlock()
			go f.accept(l, req.port)
		}
		req.reply <- err
	}
}

// sync listens on every port an allow rule for localhost:PORT names
// (global or scoped to this sandbox). Listeners stay open after a rule
// goes; the rule is checked again for every connection.
func (f *forwarder) sync() error {
	p, err := f.e.policyFile()
	if err != nil {
		return err
	}
	for _, r := range p.Rules {
		if r.Decision != "allow" || (r.Sandbox != "" && r.Sandbox != f.name) {
			continue
		}
		host, port, ok := cutPort(r.Resource)
		if !ok || !strings.EqualFold(host, "localhost") {
			continue
		}
		f.mu.Lock()
		_, open := f.ports[port]
		f.mu.Unlock()
		if open {
			continue
		}
		reply := make(chan error)
		f.listen <- listenReq{port, reply}
		if err := <-reply; err != nil {
			f.logger.Printf("listen on host.docker.internal:%d: %v", port, err)
		}
	}
	return nil
}

func cutPort(res string) (string, int, bool) {
	host, port, err := net.SplitHostPort(res)
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.Atoi(port)
	return host, n, err == nil && n > 0
}

// allowed checks the rules at connect time.
func (f *forwarder) allowed(port int) bool {
	unlock := f.e.lock()
	defer unlock()
	p, err := f.e.policyFile()
	if err != nil {
		return false
	}
	for _, r := range p.Rules {
		if r.Decision == "allow" && (r.Sandbox == "" || r.Sandbox == f.name) && ruleMatches(r.Resource, "localhost", port) {
			return true
		}
	}
	return false
}

func (f *forwarder) accept(l net.Listener, port int) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go f.serve(c, port)
	}
}

func (f *forwarder) serve(in net.Conn, port int) {
	defer in.Close()
	if !f.allowed(port) {
		f.logger.Printf("deny host.docker.internal:%d (no rule for localhost:%d)", port, port)
		return
	}
	out, err := net.DialTimeout("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		f.logger.Printf("allow host.docker.internal:%d: dial the host: %v", port, err)
		return
	}
	defer out.Close()
	f.logger.Printf("allow host.docker.internal:%d -> 127.0.0.1:%d", port, port)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}

// control serves the emulator's calls: "ping" and "sync" (re-read the
// rules and listen), each answered "ok" once done.
func (f *forwarder) control(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			line, _ := bufio.NewReader(c).ReadString('\n')
			if line == "sync\n" {
				if err := f.sync(); err != nil {
					fmt.Fprintln(c, "error:", err)
					return
				}
			}
			fmt.Fprintln(c, "ok")
		}()
	}
}
