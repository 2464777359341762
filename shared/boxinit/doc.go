// Package boxinit is the native runtime's box init stage, run by the
// watcher binary in the box's new namespaces (see Arg): it builds the
// box's file system from the supervisor's settings (shared.BoxInit) and
// hands over to the watcher as PID 1, in the same process. Its file
// helpers (OpenHostSource, CloneTree, SetTreeAttr) serve the supervisor,
// which opens the host's trees as root, too.
//
// It is Linux-only and small: it links nothing the watcher's import
// fence forbids (no encoding/json, no os/exec, no net).
package boxinit
