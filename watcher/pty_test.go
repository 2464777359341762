package watcher

import (
	"os"
	"syscall"
	"testing"

	"deathwatch/shared"
	"golang.org/x/sys/unix"
)

func TestSpawnAttrSetctty(t *testing.T) {
	attr := spawnAttr(&agent{Argv: []string{"sh"}, Setsid: true, Setctty: true})
	if !attr.Sys.Setsid || !attr.Sys.Setctty || attr.Sys.Ctty != 0 {
		t.Fatalf("SysProcAttr %+v: want a new session whose controlling terminal is the child's fd 0", attr.Sys)
	}
	if attr := spawnAttr(&agent{Argv: []string{"sh"}, Setsid: true}); attr.Sys.Setctty {
		t.Fatal("Setctty without a tty")
	}
}

// TestOpenPty: the pair is sized, the slave is the agent's, both ends
// are close-on-exec and not the watcher's terminal, bytes flow both
// ways, a resize reaches the slave, and VEOF reads ^D.
func TestOpenPty(t *testing.T) {
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		t.Skipf("no /dev/ptmx here (%v): no pseudo-terminals to test", err)
	}
	uid := uint32(os.Getuid())
	if uid == 0 {
		uid = 4242
	}
	master, slave, err := openPty(uid, 33, 111)
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()

	var st syscall.Stat_t
	if err := syscall.Fstat(int(slave.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != uid || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		t.Errorf("slave: uid %d mode %o, want a character device of uid %d", st.Uid, st.Mode, uid)
	}
	for name, f := range map[string]*os.File{"master": master, "slave": slave} {
		if err := ioctlMaster(f, func(fd int) error {
			flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			if err == nil && flags&unix.FD_CLOEXEC == 0 {
				t.Errorf("the %s is not close-on-exec", name)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := unix.IoctlGetInt(int(slave.Fd()), unix.TIOCGPGRP); err == nil {
		// TIOCGPGRP succeeds only on one's controlling terminal.
		t.Error("the slave became the test's controlling terminal (O_NOCTTY missing)")
	}
	ws, err := unix.IoctlGetWinsize(int(slave.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Row != 33 || ws.Col != 111 {
		t.Errorf("slave window %+v (%v), want 33x111", ws, err)
	}
	if err := setWinsize(master, shared.Resize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	if ws, _ := unix.IoctlGetWinsize(int(slave.Fd()), unix.TIOCGWINSZ); ws.Row != 50 || ws.Col != 132 {
		t.Errorf("after setWinsize the slave's window is %dx%d, want 50x132", ws.Row, ws.Col)
	}
	if c := eofChar(master); c != 4 {
		t.Errorf("eofChar = %#x, want ^D", c)
	}

	if _, err := slave.Write([]byte("out\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := master.Read(buf)
	if err != nil || string(buf[:n]) != "out\r\n" {
		t.Errorf("master read %q (%v), want \"out\\r\\n\"", buf[:n], err)
	}
}
