// Command golaunch is the Go floor of the native runtime's launch: the
// least a Go host process does to start a box like the supervisor's. It
// clones CMD into the box's seven new namespaces (PID, mount, IPC, UTS,
// network, user, cgroup), maps box ids 0-65535 onto a host range no
// account uses, sets the parent-death signal, runs CMD as the box's root
// and waits for it. No journal, cgroup, file system or control stream:
//
//	golaunch WATCHER -- /bin/true   two Go processes (launcher + watcher as PID 1)
//	golaunch /bin/true              one Go process and the clone
//
// It is built like the supervisor (static, trimmed) so that its start-up
// and page faults compare with the supervisor's.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// hostID is the first host id of the box's range: above the supervisor's
// id slots (2^31 to 2^31+2^28), so a probe never shares ids with a box.
const hostID = 3 << 30

// cloneFlags are the native box's namespaces.
const cloneFlags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS |
	syscall.CLONE_NEWNET | syscall.CLONE_NEWUSER | syscall.CLONE_NEWCGROUP

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: golaunch CMD [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: 65536}}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 cloneFlags,
		UidMappings:                m,
		GidMappings:                m,
		GidMappingsEnableSetgroups: true, // the watcher clears the agent's groups
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		Pdeathsig:                  syscall.SIGKILL,
	}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.ExitCode())
	case err != nil:
		fmt.Fprintf(os.Stderr, "golaunch: run %s: %v\n", os.Args[1], err)
		os.Exit(127)
	}
}
