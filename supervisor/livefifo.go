package supervisor

import "context"

// The live FIFO: a second liveness path beside the control stream, for
// a runtime whose engine sits between the supervisor and the box
// (docker: attach → containerd-shim → the box's stdin, milliseconds
// after the supervisor's death). The supervisor makes a FIFO in a fresh 0700
// folder of its own (below /run as root, below $XDG_RUNTIME_DIR as a
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

// LiveBinder is a runtime that can bind a live FIFO's folder into its
// boxes (Box.LiveDir).
type LiveBinder interface {
	// LiveKey names the engine this launch talks to, for the cached
	// proof of its binds: it changes when the engine does (a new
	// socket). ok is false where no live FIFO can be offered (a remote
	// engine, one that runs as another uid than the supervisor, a
	// CLI-only one).
	LiveKey(ctx context.Context) (key string, ok bool)
	// LiveIDs checks, once per key before its proof, that the box's
	// root is the supervisor's uid (the engine remaps no ids of its
	// own), so that the watcher can open a FIFO that is that uid's
	// alone. err: the engine could not say (no verdict is kept; the
	// next launch asks again).
	LiveIDs(ctx context.Context) (keeps bool, err error)
}

// BindProver runs the bind proof (a nonce file in dir, bind-mounted
// read-only into a real box, must read back the same from inside:
// hostcheck's staging probe) and says whether it held.
type BindProver func(ctx context.Context, runtime, dir string) (ok bool, detail string)
