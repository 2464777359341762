package proc

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses: the fields start after the last ')'.
	line := []byte("42 (a) b (c)) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 10 18446744073709551615")
	st, err := ParseStat(42, line)
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != 42 || st.PPID != 7 || st.Session != 42 || st.State != 'S' || st.Comm != "a) b (c)" || st.Start != 12345 {
		t.Errorf("ParseStat = %+v", st)
	}
	if _, err := ParseStat(1, []byte("1 (x) S 0")); err == nil {
		t.Error("a short stat line parsed")
	}
}

func TestSelfAndChild(t *testing.T) {
	me, err := StartTime(os.Getpid())
	if err != nil || me == 0 {
		t.Fatalf("own start time %d, %v", me, err)
	}
	if BootID() == "" || SelfPIDNamespace() == 0 {
		t.Error("no boot id or PID namespace")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	p := Proc{PID: cmd.Process.Pid, Start: st}
	if !p.Alive() || !containsPID(Children(os.Getpid()), p.PID) || len(Tree(os.Getpid())) < 2 {
		t.Errorf("child %v: alive %v, children %v", p, p.Alive(), Children(os.Getpid()))
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, left := WaitDead([]Proc{p}, time.Now().Add(5*time.Second)); len(left) != 0 {
		t.Errorf("%v still alive after kill and wait", left)
	}
	if (Proc{PID: p.PID, Start: p.Start + 1}).Exists() {
		t.Error("another start time counted as the same process")
	}
}

func containsPID(ps []int, pid int) bool {
	for _, p := range ps {
		if p == pid {
			return true
		}
	}
	return false
}
