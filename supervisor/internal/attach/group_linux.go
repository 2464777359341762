package attach

import "syscall"

// dieWithParent has the kernel SIGKILL the engine client when the
// supervisor dies: an orphaned client goes on with its work, and a
// `podman run` still creating the box could make it after reconcile
// found none and closed the entry. Killed with its supervisor, the
// client leaves nothing or a box the listing shows; a box it started
// sees its stdin end (the engine's attach is stdin-once), so the
// watcher ends it either way.
//
// The signal follows the thread that forked, not the process. The one
// thread the supervisor ends is the native runtime's clone thread that
// cannot leave a box's cgroup (it exits locked rather than run on in
// the box); a client forked from it dies then and ends its box: it
// fails closed.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
