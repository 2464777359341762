package shared

import (
	"time"
)

// Hello is the first frame from the host.
type Hello struct {
	Version uint32 // ProtocolVersion
	Nonce   string // the launch nonce the supervisor journaled
}

func (h Hello) Marshal() []byte {
	var e enc
	e.u64(uint64(h.Version))
	e.str(h.Nonce)
	return e.b
}

func ParseHello(b []byte) (Hello, error) {
	d := dec{b: b, what: "hello"}
	h := Hello{Version: d.u32("version"), Nonce: d.str("nonce")}
	return h, d.done()
}

// Ready tells the host the agent started.
type Ready struct {
	PID     int       // the agent's pid as the watcher sees it
	Started time.Time // when it was started (box clock)
}

func (r Ready) Marshal() []byte {
	var e enc
	e.u64(uint64(r.PID))
	e.i64(r.Started.UnixNano())
	return e.b
}

func ParseReady(b []byte) (Ready, error) {
	d := dec{b: b, what: "ready"}
	pid := d.u32("pid")
	ns := d.i64("started")
	return Ready{PID: int(pid), Started: time.Unix(0, ns)}, d.done()
}

// Seq is the payload of ping and pong: the host's sequence number.
type Seq uint64

func (s Seq) Marshal() []byte { var e enc; e.u64(uint64(s)); return e.b }

func ParseSeq(b []byte) (Seq, error) {
	d := dec{b: b, what: "ping"}
	s := Seq(d.u64("seq"))
	return s, d.done()
}

// Signal asks the watcher to deliver a signal to the agent.
type Signal struct{ Number int }

func (s Signal) Marshal() []byte { var e enc; e.u64(uint64(s.Number)); return e.b }

func ParseSignal(b []byte) (Signal, error) {
	d := dec{b: b, what: "signal"}
	n := d.u64("number")
	if d.err == nil && (n == 0 || n > 64) {
		d.fail("number", "not a signal number (1-64)")
	}
	return Signal{Number: int(n)}, d.done()
}

// Resize carries a new terminal window size.
type Resize struct{ Rows, Cols uint16 }

func (r Resize) Marshal() []byte {
	var e enc
	e.u64(uint64(r.Rows))
	e.u64(uint64(r.Cols))
	return e.b
}

func ParseResize(b []byte) (Resize, error) {
	d := dec{b: b, what: "resize"}
	rows, cols := d.u64("rows"), d.u64("cols")
	if d.err == nil && (rows > 0xffff || cols > 0xffff) {
		d.fail("rows/cols", "out of range")
	}
	return Resize{Rows: uint16(rows), Cols: uint16(cols)}, d.done()
}

// Stop asks the watcher to end the agent: TERM, up to Grace, then KILL.
type Stop struct{ Grace time.Duration }

func (s Stop) Marshal() []byte { var e enc; e.i64(int64(s.Grace)); return e.b }

func ParseStop(b []byte) (Stop, error) {
	d := dec{b: b, what: "stop"}
	g := time.Duration(d.i64("grace"))
	if d.err == nil && g < 0 {
		d.fail("grace", "negative")
	}
	return Stop{Grace: g}, d.done()
}

// Reason says why the box ended.
type Reason string

const (
	ReasonExited       Reason = "exited"        // the agent exited by itself
	ReasonSignaled     Reason = "signaled"      // the agent died of a signal
	ReasonDeadline     Reason = "deadline"      // the in-box deadline passed
	ReasonLivenessLost Reason = "liveness-lost" // EOF, silence or a protocol error on the stream
	ReasonStopped      Reason = "stopped"       // the host sent stop
	ReasonSetupFailed  Reason = "setup-failed"  // the agent could not be started
	// ReasonOOM: the agent ended with 137 (SIGKILL, or a shell whose
	// command died of it) and the box's memory cgroup counted an OOM kill
	// while it ran. The code stays 137 (128+9), as with Docker's
	// OOMKilled; the reason tells it from a plain kill.
	ReasonOOM Reason = "oom"
	// ReasonVerifyFailed: a copy arrived but does not match its
	// manifest (a file's SHA-256, the manifest's, the counts); code
	// ExitCopyFailed. ReasonCopyRefused: a copy was refused whole (over
	// --copy-out-limit, unreadable, a target it must not write); the
	// same code. See copy.go.
	ReasonVerifyFailed Reason = "verify-failed"
	ReasonCopyRefused  Reason = "copy-refused"
	// ReasonControllerLost: the supervisor's controller died (its parent
	// process, --controller-pid's process, --controller-fd's EOF);
	// ReasonOutputLost: a write of the agent's output to the supervisor's
	// stdout or stderr failed (EPIPE: the controller's end is gone). The
	// supervisor decides both and ended the box; code ExitControllerLost.
	ReasonControllerLost Reason = "controller-lost"
	ReasonOutputLost     Reason = "output-lost"
)

// Exit is the watcher's final record.
type Exit struct {
	Reason  Reason
	Code    int           // the status the watcher exits with (see exit.go)
	Signal  int           // the signal that ended the agent, if any
	Runtime time.Duration // from agent start to agent end
	Sweep   time.Duration // time spent ending the remaining processes
	Message string        // a human sentence for setup failures and protocol errors
}

func (x Exit) Marshal() []byte {
	var e enc
	e.str(string(x.Reason))
	e.u64(uint64(x.Code))
	e.u64(uint64(x.Signal))
	e.i64(int64(x.Runtime))
	e.i64(int64(x.Sweep))
	e.str(x.Message)
	return e.b
}

func ParseExit(b []byte) (Exit, error) {
	d := dec{b: b, what: "exit"}
	x := Exit{
		Reason:  Reason(d.str("reason")),
		Code:    int(d.u32("code")),
		Signal:  int(d.u32("signal")),
		Runtime: time.Duration(d.i64("runtime")),
		Sweep:   time.Duration(d.i64("sweep")),
		Message: d.str("message"),
	}
	return x, d.done()
}
