package watcher

import (
	"errors"
	"os"
	"sync"

	"deathwatch/shared"
)

// agentStdio makes the agent's fds 0-2 for spec: /dev/null and a pipe
// each for stdout and stderr; with Stdin, a pipe for stdin too; with
// TTY, the slave of a new pty for all three. It keeps what the watcher
// holds: the ends the agent gets until it starts (childEnds), what the
// relay reads (outputs), the pty's master, the stdin relay.
func (w *watcher) agentStdio(spec *shared.Spec) ([]*os.File, error) {
	if spec.TTY {
		master, slave, err := openPty(spec.UID, spec.Rows, spec.Cols)
		if err != nil {
			return nil, errors.New("allocate the agent's pty: " + err.Error())
		}
		w.childEnds = []*os.File{slave}
		w.outputs = []*os.File{master}
		w.pty = master
		w.stdin = newStdinRelay(master, true, w.out)
		return []*os.File{slave, slave, slave}, nil
	}
	var stdin *os.File
	var err error
	if spec.Stdin {
		var wr *os.File
		if stdin, wr, err = os.Pipe(); err != nil {
			return nil, errors.New("agent stdin: " + err.Error())
		}
		w.stdin = newStdinRelay(wr, false, w.out)
	} else if stdin, err = os.Open("/dev/null"); err != nil {
		// A box without /dev/null: an empty pipe reads as EOF too.
		var wr *os.File
		if stdin, wr, err = os.Pipe(); err != nil {
			return nil, errors.New("agent stdin: " + err.Error())
		}
		wr.Close()
	}
	outR, outW, err1 := os.Pipe()
	errR, errW, err2 := os.Pipe()
	if err := errors.Join(err1, err2); err != nil {
		return nil, errors.New("agent output pipes: " + err.Error())
	}
	w.childEnds = []*os.File{stdin, outW, errW}
	w.outputs = []*os.File{outR, errR}
	return w.childEnds, nil
}

// input obeys a stdin frame.
func (w *watcher) input(p []byte) error {
	if w.stdin == nil {
		return &shared.ProtocolError{Reason: "stdin: this box takes no input (the spec asked for neither stdin nor tty)"}
	}
	return w.stdin.push(p)
}

// inputEOF obeys a stdin-eof frame. Without input it changes nothing:
// the agent's stdin, /dev/null, is at its end already.
func (w *watcher) inputEOF(p []byte) error {
	if err := shared.CheckStdinEOF(p); err != nil {
		return err
	}
	if w.stdin == nil {
		return nil
	}
	return w.stdin.end()
}

// stdinRelay writes the host's input to the agent's stdin (a pipe, or
// the pty's master) from a goroutine of its own, under the credit of
// shared/stdin.go. The loop only queues, and what it may queue is
// bounded by the credit granted, so it never waits on the agent: a
// stalled agent stalls its input, never the heartbeat or EOF.
type stdinRelay struct {
	dst    *os.File
	tty    bool // stdin-eof writes VEOF rather than closing dst
	out    *shared.Writer
	window int

	mu      sync.Mutex
	queue   [][]byte
	credit  int  // granted and not yet received
	eof     bool // stdin-eof received
	stopped bool // the exit record is on its way: no more credit
	wake    chan struct{}
	sending sync.Mutex // held across a credit frame's check and send
}

func newStdinRelay(dst *os.File, tty bool, out *shared.Writer) *stdinRelay {
	return &stdinRelay{dst: dst, tty: tty, out: out, window: shared.StdinWindowSize, wake: make(chan struct{}, 1)}
}

// push queues one stdin frame's payload. The loop calls it.
func (r *stdinRelay) push(p []byte) error {
	if err := shared.CheckStdin(p); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.eof:
		return &shared.ProtocolError{Reason: "stdin after stdin-eof"}
	case len(p) > r.credit:
		return &shared.ProtocolError{Reason: "stdin: " + itoa(len(p)) + " bytes beyond the credit of " + itoa(r.credit) + " (the host must wait for stdin-credit)"}
	}
	r.credit -= len(p)
	r.queue = append(r.queue, p)
	r.poke()
	return nil
}

// end marks the end of the input. The loop calls it.
func (r *stdinRelay) end() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.eof {
		return &shared.ProtocolError{Reason: "a second stdin-eof"}
	}
	r.eof = true
	r.poke()
	return nil
}

func (r *stdinRelay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run grants the window, then writes what is queued in order and gives
// the credit back as bytes leave the queue: written, or dropped once the
// agent's stdin is gone (the host must never wait for credit that cannot
// come). After stdin-eof it ends the input and returns.
func (r *stdinRelay) run() {
	r.grant(r.window)
	returned, broken := 0, false
	for {
		r.mu.Lock()
		for len(r.queue) == 0 && !r.eof {
			r.mu.Unlock()
			<-r.wake
			r.mu.Lock()
		}
		if len(r.queue) == 0 { // and stdin-eof
			r.mu.Unlock()
			break
		}
		p := r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		empty := len(r.queue) == 0
		r.mu.Unlock()

		if !broken {
			if _, err := r.dst.Write(p); err != nil {
				broken = true
			}
		}
		returned += len(p)
		if empty || returned >= r.window/4 {
			r.grant(returned)
			returned = 0
		}
	}
	if broken {
		return
	}
	if r.tty {
		_, _ = r.dst.Write([]byte{eofChar(r.dst)})
		return
	}
	r.dst.Close()
}

// grant gives the host n more bytes of credit: counted before the frame
// leaves, so that input sent on it is never found beyond the credit.
func (r *stdinRelay) grant(n int) {
	r.sending.Lock()
	defer r.sending.Unlock()
	r.mu.Lock()
	stopped := r.stopped
	if !stopped {
		r.credit += n
	}
	r.mu.Unlock()
	if !stopped {
		_ = r.out.Send(shared.FrameStdinCredit, shared.Credit{Bytes: uint32(n)}.Marshal())
	}
}

// stop ends the credit before the exit record: no stdin-credit follows
// it. It waits for a credit frame on its way.
func (r *stdinRelay) stop() {
	if r == nil {
		return
	}
	r.sending.Lock()
	defer r.sending.Unlock()
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
}
