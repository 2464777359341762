package cli

import (
	"bytes"
	"io"
	"os"
	"runtime"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// session is the host side of exec's input: what the agent reads, the
// window sizes that follow the host terminal, and what restores the
// terminal.
type session struct {
	stdin  io.Reader
	resize chan shared.Resize
	close  func() // restores the terminal; always call it
	raw    bool   // the terminal is in raw mode until close
}

// crlf turns each newline into CR LF: the supervisor's own lines on a
// raw terminal (no output processing) would otherwise step right.
type crlf struct{ w io.Writer }

func (c crlf) Write(p []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(p, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// terminalFD is the fd of w when it is a terminal, else -1.
func terminalFD(w any) int {
	if f, ok := w.(*os.File); ok && f != nil && isTerminal(int(f.Fd())) {
		return int(f.Fd())
	}
	return -1
}

// input prepares exec's input for o (--tty, --stdin): the window size
// into o, and, when the supervisor's stdin is a terminal under --tty,
// raw mode until close. Without either flag the supervisor's stdin is
// never read.
func (e *ExecCmd) input(c *cmdContext, o *supervisor.ExecOptions) (*session, error) {
	s := &session{close: func() {}}
	if !e.TTY && !e.Stdin {
		return s, nil
	}
	s.stdin = c.stdin
	if !e.TTY {
		return s, nil
	}
	if !ttySupported {
		return nil, exitcode.Usage("--tty is not supported on %s (the host console cannot be put in raw mode here); use --stdin", runtime.GOOS)
	}
	in, out := terminalFD(c.stdin), terminalFD(c.stdout)
	size := in
	if size < 0 {
		size = out
	}
	if size >= 0 {
		o.Rows, o.Cols, _ = windowSize(size)
	}
	var stops []func()
	s.close = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if in >= 0 {
		restore, err := makeRaw(in)
		if err != nil {
			return nil, exitcode.Setup("put the terminal in raw mode: %w", err)
		}
		s.raw = true
		stops = append(stops, func() {
			if err := restore(); err != nil {
				c.stderr.Write([]byte("supervisor: restore the terminal: " + err.Error() + " (run `stty sane`)\n"))
			}
		})
	}
	if size >= 0 {
		winch := make(chan os.Signal, 1)
		stopNotify := notifyResize(winch)
		s.resize = make(chan shared.Resize)
		done := make(chan struct{})
		go func() {
			for {
				select {
				case <-done:
					return
				case <-winch:
				}
				rows, cols, ok := windowSize(size)
				if !ok {
					continue
				}
				select {
				case s.resize <- shared.Resize{Rows: rows, Cols: cols}:
				case <-done:
					return
				}
			}
		}()
		stops = append(stops, func() { stopNotify(); close(done) })
	}
	return s, nil
}
