package docker

// The live FIFO: a second, earlier liveness alarm beside the control
// stream, for Docker, whose attach reaches the box through the engine
// and containerd-shim. The hooks (supervisor.LaunchHooks,
// livefifo_fifo.go) make a FIFO in a fresh 0700 folder of the
// supervisor's own (below /run as root, $XDG_RUNTIME_DIR as a user),
// write the launch nonce into it and hold its only write end for the
// box's life. The folder is bound read-only at LiveDirInBox; the FIFO
// (0600, owned by the supervisor's uid, which is the box's root) is
// opened by the watcher as root before the agent exists, and the agent
// cannot open it. When the supervisor dies the kernel closes its end and
// the watcher reads EOF (watcher/livefifo.go). It is offered only where
// a bind of the supervisor's folder is proven for the engine.

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

// liveFDInBox is a one-step run's live pipe's descriptor in the box
// (livefd_linux.go): the first one --preserve-fds passes.
const liveFDInBox = 3
