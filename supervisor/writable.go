package supervisor

import "deathwatch/supervisor/exitcode"

// agentDevices are the device files of the box a command writes to:
// the sinks and sources shells and runtimes open for writing, the
// controlling terminal, and the pseudo-terminal multiplexer (a folder
// of pseudo-terminals, and where /dev/ptmx is a device of its own, as
// in a microVM, that device).
var agentDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts"}

// WritablePaths are the box paths the agent may write in (the spec's
// Writable, which the watcher enforces with Landlock), or nil when the
// box's root is writable (--read-write-root): then nothing is limited.
// They are the box's bounded /tmp and /dev/shm, every read-write
// --mount where the box has it (the source of a mount-bridge link: sbx
// passes a workspace through at its host path), the devices of
// agentDevices, and /proc, whose files the agent may write are knobs of
// its own processes (the runtimes keep /proc/sys read-only). Pure:
// table-tested.
func WritablePaths(b *Box) []string {
	if b.ReadWriteRoot {
		return nil
	}
	w := []string{"/tmp", "/dev/shm", "/proc"}
	w = append(w, agentDevices...)
	for _, m := range b.Mounts {
		if m.ReadOnly {
			continue
		}
		at := m.Target
		for _, l := range b.Links {
			if l.Target == m.Target {
				at = l.Source
			}
		}
		w = append(w, at)
	}
	return w
}

// WritableReporter is a runtime whose boxes have writable paths of
// their own beside their mounts (sbx: the scratch workspace of a
// sandbox made without --mount).
type WritableReporter interface {
	Writable(b *Box) []string
}

// limitWrites puts the box's write limits into the spec, once the
// runtime has prepared the box (its links say where a mount is).
func (l *launch) limitWrites() error {
	l.spec.Writable = WritablePaths(l.box)
	if wr, ok := l.rt.(WritableReporter); ok && l.spec.Writable != nil {
		l.spec.Writable = append(l.spec.Writable, wr.Writable(l.box)...)
	}
	if err := l.spec.Validate(); err != nil {
		return exitcode.Usage("%w", err)
	}
	return nil
}
