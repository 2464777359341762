// Package native makes boxes from Linux namespaces and a cgroup, the way
// bubblewrap does, with no daemon: the box's init stage (a hidden mode
// of the supervisor binary) builds the file system and execs the
// watcher as PID 1 with the control stream on an inherited socketpair.
//
// It is Linux-only: on other systems the package registers a descriptor
// that is never installed, so `--runtime native` and doctor say so, and
// --runtime auto never picks it.
package native
