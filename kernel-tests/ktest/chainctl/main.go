// Command chainctl is the kernel tests' controller written in Go: a
// separate process that starts `supervisor exec` children with os/exec,
// the way a controller does, so that a test can SIGKILL the controller
// and watch its supervisors and boxes end.
//
//	chainctl -n N [-mode MODE] -- SUPERVISOR ARGS...
//
// It starts N copies of SUPERVISOR ARGS, each with a stdout pipe, prints
// "started PID" for each, waits until each printed a line "ready" (the
// test's agent says it) and prints "ready"; then it waits to be killed.
// Modes:
//
//	main     start every child from the main goroutine
//	thread   start each from a goroutine locked to its OS thread that
//	         exits without unlocking: the thread that forked the child dies
//	fdshell  start each through `sh -c '"$@"; echo done' sh SUPERVISOR
//	         ARGS...` with a pipe as fd 3 whose write end only chainctl
//	         holds (the test passes --controller-fd 3)
//	epipe    after ready, close the read end of every stdout pipe, wait
//	         for the children and print "exit CODE" for each
//	stopped  start one child (the test set DEATHWATCH_TEST_PAUSE_AT) and
//	         print "stopped PID" once it stopped itself; then wait
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"deathwatch/supervisor/proc"
)

func main() {
	n := flag.Int("n", 1, "children")
	mode := flag.String("mode", "main", "main, thread, fdshell, epipe or stopped")
	flag.Parse()
	argv := flag.Args()
	if len(argv) == 0 {
		fail("usage: chainctl -n N [-mode MODE] -- SUPERVISOR ARGS...")
	}
	var cmds []*exec.Cmd
	var outs []io.ReadCloser
	var hold []*os.File
	for range *n {
		cmd := exec.Command(argv[0], argv[1:]...)
		if *mode == "fdshell" {
			r, w, err := os.Pipe()
			if err != nil {
				fail("pipe: %v", err)
			}
			cmd = exec.Command("sh", append([]string{"-c", `"$@"; echo done >&2`, "sh"}, argv...)...)
			cmd.ExtraFiles = []*os.File{r}
			defer r.Close()
			hold = append(hold, w)
		}
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			fail("stdout pipe: %v", err)
		}
		start := func() error { return cmd.Start() }
		if *mode == "thread" {
			errc := make(chan error, 1)
			go func() {
				runtime.LockOSThread()
				errc <- cmd.Start()
				// No UnlockOSThread: the thread ends with the goroutine.
			}()
			start = func() error { return <-errc }
		}
		if err := start(); err != nil {
			fail("start %s: %v", argv[0], err)
		}
		for _, f := range cmd.ExtraFiles {
			f.Close() // the child has it; only the write end stays here
		}
		fmt.Printf("started %d\n", cmd.Process.Pid)
		cmds, outs = append(cmds, cmd), append(outs, out)
		if *mode == "stopped" {
			for !stopped(cmd.Process.Pid) {
				time.Sleep(5 * time.Millisecond)
			}
			fmt.Printf("stopped %d\n", cmd.Process.Pid)
			sleepForever()
		}
	}
	for i, out := range outs {
		sc := bufio.NewScanner(out)
		for sc.Scan() && strings.TrimSpace(sc.Text()) != "ready" {
		}
		if sc.Err() != nil || strings.TrimSpace(sc.Text()) != "ready" {
			fail("child %d ended before it said ready (%v)", cmds[i].Process.Pid, sc.Err())
		}
	}
	fmt.Println("ready")
	if *mode == "epipe" {
		for _, out := range outs {
			out.Close()
		}
		for _, cmd := range cmds {
			cmd.Wait()
			fmt.Printf("exit %d\n", cmd.ProcessState.ExitCode())
		}
		return
	}
	runtime.KeepAlive(hold)
	sleepForever()
}

// stopped reports whether pid is in state T (stopped).
func stopped(pid int) bool {
	st, err := proc.ReadStat(pid)
	return err == nil && st.State == 'T'
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chainctl: "+format+"\n", args...)
	os.Exit(1)
}

// sleepForever waits to be killed (select{} with no other goroutine is
// the runtime's deadlock error).
func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}
