// Command goinit is a set of minimal Go inits that the launch benchmark
// runs beside the watcher to show where a Go PID 1's start-up time goes.
// Each mode adds one thing the watcher does:
//
//	goinit exit              a static Go binary that exits at once
//	goinit fork CMD...       + fork/exec CMD and wait4 for it
//	goinit notify-chld CMD...  + signal.Notify(SIGCHLD) before the fork
//	goinit notify-7 CMD...   + SIGCHLD, TERM, INT, HUP, QUIT, USR1, USR2 before the fork
//	goinit notify-all CMD...   + signal.Notify() of every signal (the watcher's shape)
//	goinit notify-async CMD... SIGCHLD first, every other signal in a goroutine
//	                         while the child starts
//
// It is built like the watcher (static, trimmed) and carries the same
// runtime settings.

//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: goinit exit|fork|notify-chld|notify-7|notify-all|notify-async [CMD...]")
		os.Exit(2)
	}
	mode, argv := os.Args[1], os.Args[2:]
	if mode == "exit" {
		os.Exit(0)
	}
	if len(argv) == 0 {
		fmt.Fprintf(os.Stderr, "goinit %s: name a command to run\n", mode)
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 64)
	switch mode {
	case "fork":
		sigs = nil
	case "notify-chld":
		signal.Notify(sigs, syscall.SIGCHLD)
	case "notify-7":
		signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP,
			syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	case "notify-all":
		signal.Notify(sigs)
	case "notify-async":
		signal.Notify(sigs, syscall.SIGCHLD)
		go signal.Notify(sigs)
	default:
		fmt.Fprintf(os.Stderr, "goinit: unknown mode %q\n", mode)
		os.Exit(2)
	}
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "goinit: start %s: %v\n", argv[0], err)
		os.Exit(127)
	}
	var ws syscall.WaitStatus
	if sigs == nil {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			os.Exit(1)
		}
		os.Exit(ws.ExitStatus())
	}
	for s := range sigs {
		if s != syscall.SIGCHLD {
			continue
		}
		if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid {
			os.Exit(ws.ExitStatus())
		}
	}
}
