package supervisor

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"deathwatch/supervisor/exitcode"
)

// Lifecycle event names, in the order a launch produces them.
const (
	EventJournaled = "journaled"
	EventCreated   = "created"
	EventStarted   = "started"
	EventReady     = "ready"
	// Copies (supervisor/copy): staged once the agent started after a copy-in
	// (the watcher verified it first); exported when a copy-out tree
	// arrived, verified once its manifest checked and was written.
	EventStaged   = "staged"
	EventExported = "exported"
	EventVerified = "verified"
	EventExited   = "exited"
	EventRemoved  = "removed"
)

// EventsVersion is the version of the --events line format
// (docs/schemas/events.v1.json): within a version fields are only
// added; a removal or a change of meaning is a new version.
const EventsVersion = 1

// Event is one line of --events output: line-delimited JSON for
// controllers not written in Go. It never carries the agent's
// environment.
type Event struct {
	V        int       `json:"v"` // EventsVersion
	Event    string    `json:"event"`
	Time     time.Time `json:"time"`
	Instance string    `json:"instance"`
	LaunchID string    `json:"launch_id"`
	Box      string    `json:"box"`
	Runtime  string    `json:"runtime"`
	PID      int       `json:"pid,omitempty"`    // ready: the agent's pid in the box
	Code     *int      `json:"code,omitempty"`   // exited: the supervisor's exit status
	Reason   string    `json:"reason,omitempty"` // exited: why
	Error    string    `json:"error,omitempty"`  // removed: a removal that failed
	// staged, exported, verified: what was copied and how long it took;
	// Path is the result (exported) or its manifest (verified), Refused
	// the symlinks not made as they leave the exported tree.
	Path    string  `json:"path,omitempty"`
	Files   int64   `json:"files,omitempty"`
	Bytes   int64   `json:"bytes,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	Refused int     `json:"refused_symlinks,omitempty"`
	// Dropped (verified, by archive): entries of the engine's archive
	// the watcher's manifest did not name, not kept.
	Dropped int `json:"dropped,omitempty"`
	// Transport is how the copy travelled: "archive" (the engine's
	// archive endpoint) or "frames" (the control stream).
	Transport string `json:"transport,omitempty"`
}

// Events writes events; a nil *Events discards them.
type Events struct {
	mu  sync.Mutex
	w   io.Writer
	c   io.Closer
	err error
}

// OpenEvents opens --events: "fd:N" (an inherited descriptor) or a
// file path, created (mode 0600) or truncated, so that a file reused
// across launches holds one launch's events; appendTo appends instead
// (--events-append).
func OpenEvents(spec string, appendTo bool) (*Events, error) {
	if spec == "" {
		return nil, nil
	}
	if n, ok := strings.CutPrefix(spec, "fd:"); ok {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < 0 {
			return nil, exitcode.Usage("--events %s: want fd:N with N a descriptor number", spec)
		}
		f := os.NewFile(uintptr(fd), "events")
		if f == nil {
			return nil, exitcode.Usage("--events %s: descriptor %d is not open", spec, fd)
		}
		if _, err := f.Stat(); err != nil {
			return nil, exitcode.Usage("--events %s: descriptor %d is not open", spec, fd)
		}
		return &Events{w: f, c: f}, nil
	}
	mode := os.O_TRUNC
	if appendTo {
		mode = os.O_APPEND
	}
	f, err := os.OpenFile(spec, os.O_WRONLY|os.O_CREATE|mode, 0o600)
	if err != nil {
		return nil, exitcode.Usage("--events: %w", err)
	}
	return &Events{w: f, c: f}, nil
}

// Emit writes one event line, stamping its time (when ev has none).
func (e *Events) Emit(ev Event) {
	if e == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	ev.V = EventsVersion
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return
	}
	if _, err := e.w.Write(append(b, '\n')); err != nil {
		e.err = fmt.Errorf("write event: %w", err)
	}
}

// Close closes the underlying file when Events opened it.
func (e *Events) Close() error {
	if e == nil || e.c == nil {
		return nil
	}
	return e.c.Close()
}
