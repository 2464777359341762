// Package attach starts an engine client that carries a box's control
// stream on its stdin and stdout, for the runtimes that attach through a
// CLI (docker, podman, sbx).
package attach

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// Start starts c, an engine client that carries the control
// stream on its stdin and stdout (docker start --attach, sbx exec -i),
// in a process group of its own: its stdin a pipe whose only write end
// is ours (close-on-exec, like every descriptor Go opens), its stdout
// the frames from the watcher, its stderr stderr. kind names the CLI
// in a message ("docker is not installed").
func Start(c *exec.Cmd, kind, box string, stderr io.Writer) (*supervisor.Started, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start box %s: %w", box, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("start box %s: %w", box, err)
	}
	c.Stdin, c.Stdout = inR, outW
	c.Stderr = stderr
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	ownProcessGroup(c)
	// The stderr copy must not outlive the client for long when a
	// re-exec'd child of it still holds the pipe.
	c.WaitDelay = 2 * time.Second
	if err := c.Start(); err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		if errors.Is(err, exec.ErrNotFound) {
			return nil, exitcode.Engine("%s is not installed (not found on PATH)", kind)
		}
		return nil, exitcode.Setup("start box %s: %w", box, err)
	}
	// Only the child holds these ends now.
	inR.Close()
	outW.Close()
	return &supervisor.Started{
		Control: &pipeRW{r: outR, w: inW},
		Wait:    c.Wait,
		Kill:    func() { killGroup(c.Process) },
	}, nil
}

// pipeRW is the control stream over the client's stdin and stdout.
// Close drops our write end (the watcher sees EOF); the read end stays
// readable until the client's output ends, then is closed by CloseRead.
type pipeRW struct {
	r *os.File
	w *os.File
}

func (p *pipeRW) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *pipeRW) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *pipeRW) Close() error                { return p.w.Close() }

// CloseRead releases the read end.
func (p *pipeRW) CloseRead() error { return p.r.Close() }
