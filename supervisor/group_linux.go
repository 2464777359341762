package supervisor

import "syscall"

// dieWithParent has the kernel SIGKILL the engine client when the
// supervisor dies. An orphaned client would go on with its work: a
// `podman run` still creating the box when its supervisor was killed
// made the box after `reconcile` had found none and closed the entry
// (the crash-window matrix's in-run point catches it). Killed with its
// supervisor, the client leaves either nothing or a box that the
// listing shows by the time reconcile asks; a box it had started sees
// its stdin end as it would on the pipe's EOF (the engine's attach is
// stdin-once), so the watcher ends it either way.
//
// The signal follows the thread that forked, not the process. The
// supervisor ends a thread in one place only: the native runtime's
// clone thread when it cannot leave a box's cgroup again (it exits
// locked rather than run on inside the box). A client forked earlier
// from that thread would die then, which ends its box: it fails closed.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
