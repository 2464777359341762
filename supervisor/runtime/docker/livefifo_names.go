package docker

// The live FIFO: a second liveness path beside the control stream, for
// Docker, whose engine sits between the supervisor and the box (attach →
// containerd-shim → the box's stdin, milliseconds after the
// supervisor's death). The runtime's hooks (supervisor.LaunchHooks,
// livefifo_fifo.go) make a FIFO in a fresh 0700 folder of the supervisor's own (below /run as root, below $XDG_RUNTIME_DIR as a
// user), writes the launch nonce into it and holds its only write end
// for the life of the box; the folder is bind-mounted read-only at
// LiveDirInBox, where only the box's root can open the FIFO (mode 0600,
// owned by the supervisor's uid, which is the box's root: the host's
// root for a rootful engine, the user for the user's rootless one). The
// watcher opens it as root, before the agent exists; the agent, another
// uid without capabilities, cannot. When the supervisor dies the kernel
// closes its end and the watcher's read sees EOF at once (watcher's
// livefifo.go). The control stream stays the contract: the FIFO is an
// extra, earlier alarm, offered only where a bind of the supervisor's
// folder is proven for this engine.

// LiveDirInBox is where a box sees its live FIFO's folder; /dev is the
// runtime's own tmpfs, and the folder's mode keeps the agent out.
const LiveDirInBox = "/dev/.deathwatch"

// LiveFIFOName is the FIFO's name in its folder.
const LiveFIFOName = "live"
