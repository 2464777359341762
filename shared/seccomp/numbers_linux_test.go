package seccomp

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// The rules' numbers for the architecture under test agree with
// golang.org/x/sys (the tables there are generated from the kernel's).
func TestNumbersMatchXSys(t *testing.T) {
	want := map[string]int{
		"keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY,
		"bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN, "userfaultfd": unix.SYS_USERFAULTFD,
		"kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD,
		"init_module": unix.SYS_INIT_MODULE, "finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE,
		"clock_settime": unix.SYS_CLOCK_SETTIME, "clock_adjtime": unix.SYS_CLOCK_ADJTIME,
		"settimeofday": unix.SYS_SETTIMEOFDAY, "adjtimex": unix.SYS_ADJTIMEX,
		"swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF, "reboot": unix.SYS_REBOOT, "acct": unix.SYS_ACCT,
		"quotactl": unix.SYS_QUOTACTL, "quotactl_fd": unix.SYS_QUOTACTL_FD, "lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER,
		"io_uring_register": unix.SYS_IO_URING_REGISTER, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
		"nfsservctl": unix.SYS_NFSSERVCTL, "syslog": unix.SYS_SYSLOG, "fanotify_init": unix.SYS_FANOTIFY_INIT,
		"personality": unix.SYS_PERSONALITY, "mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2,
		"pivot_root": unix.SYS_PIVOT_ROOT, "move_mount": unix.SYS_MOVE_MOUNT, "open_tree": unix.SYS_OPEN_TREE,
		"fsopen": unix.SYS_FSOPEN, "fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK,
		"mount_setattr": unix.SYS_MOUNT_SETATTR, "setns": unix.SYS_SETNS, "unshare": unix.SYS_UNSHARE,
		"clone": unix.SYS_CLONE, "clone3": unix.SYS_CLONE3,
	}
	for _, r := range rules {
		var n int
		switch runtime.GOARCH {
		case "amd64":
			n = r.amd64
		case "arm64":
			n = r.arm64
		default:
			t.Skipf("no table for %s", runtime.GOARCH)
		}
		if w, ok := want[r.name]; ok && n != w {
			t.Errorf("%s: %d, want %d on %s", r.name, n, w, runtime.GOARCH)
		}
	}
}
