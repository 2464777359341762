// Command gocontroller is a Go controller that runs a pool of boxes
// through the deathwatch library: Init first in main, one Exec per box
// in a goroutine of its own, a deadline for each, and each box's result
// printed as one line. Its boxes die with it, SIGKILL included: each
// box's control stream has its only host end in this process.
//
//	gocontroller [-boxes N] [-deadline D] [-share DIR -share-owner UID:GID] [-- CMD ARGS]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"deathwatch/supervisor"
	_ "deathwatch/supervisor/runtime/native" // the runtimes this controller may use
)

func main() {
	// First in main: the native runtime re-executes this program to
	// hold the user namespace of an idmapped mount (-share); that copy
	// ends inside Init and never reaches the code below.
	supervisor.Init()

	boxes := flag.Int("boxes", 3, "boxes to run at once")
	deadline := flag.Duration("deadline", time.Minute, "each box's deadline")
	runtime := flag.String("runtime", "native", "the runtime that makes the boxes")
	watcher := flag.String("watcher", "", "the watcher binary (default: next to this program, then PATH)")
	journal := flag.String("journal", "", "the journal folder (default: the supervisor's)")
	share := flag.String("share", "", "a folder each box gets read-write at /share")
	shareOwner := flag.String("share-owner", "", "UID:GID that owns -share (not root): the agent writes there as that account")
	flag.Parse()
	argv := flag.Args()
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-c", "echo hello from box $BOX"}
	}
	fmt.Fprintf(os.Stderr, "gocontroller: started, pid %d\n", os.Getpid())

	base := supervisor.ExecOptions{
		Instance: "gocontroller", JournalDir: *journal, Runtime: *runtime, WatcherPath: *watcher,
		Deadline: *deadline, Argv: argv,
	}
	if *share != "" {
		owner, err := parseIDs(*shareOwner)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gocontroller: -share-owner %q: %v\n", *shareOwner, err)
			os.Exit(2)
		}
		base.Mounts = []supervisor.Mount{{Source: *share, Target: "/share"}}
		base.MountOwner = &owner
	}
	os.Exit(runPool(base, *boxes))
}

// runPool runs n boxes of base at once, prints one line per box as it
// ends, and returns the worst exit status (0 when every box exited 0).
// SIGINT and SIGTERM go to every box: the first stops its agent.
func runPool(base supervisor.ExecOptions, n int) int {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	fan := make([]chan os.Signal, n)
	for i := range fan {
		fan[i] = make(chan os.Signal, 4)
	}
	go func() {
		for s := range sigs {
			for _, c := range fan {
				c <- s
			}
		}
	}()
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		o := base
		o.AgentEnv = []string{"BOX=" + strconv.Itoa(i)}
		o.IO = supervisor.ExecIO{
			Stdout: os.Stdout, Stderr: os.Stderr, Signals: fan[i],
			Say: func(line string) { fmt.Fprintf(os.Stderr, "gocontroller: box %d: %s\n", i, line) },
			OnEvent: func(ev supervisor.Event) {
				if ev.Event == supervisor.EventReady {
					say("ready %d %s", i, ev.Box)
				}
			},
		}
		wg.Go(func() {
			res, err := supervisor.Exec(context.Background(), o)
			codes[i] = res.Code
			took := res.Timings.Exited.Sub(res.Timings.Started).Round(time.Millisecond)
			var failed interface{ Code() int }
			switch {
			case errors.As(err, &failed):
				say("box %d: exit %d (%s): %v", i, failed.Code(), res.Reason, err)
			default:
				say("box %d: exit %d (%s) in %v, removed %v", i, res.Code, res.Reason, took, res.Removed)
			}
		})
	}
	wg.Wait()
	worst := 0
	for _, c := range codes {
		worst = max(worst, c)
	}
	return worst
}

// parseIDs reads UID:GID.
func parseIDs(s string) (supervisor.HostIDs, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, uerr := strconv.ParseUint(u, 10, 32)
	gid, gerr := strconv.ParseUint(g, 10, 32)
	if !ok || uerr != nil || gerr != nil {
		return supervisor.HostIDs{}, errors.New("want UID:GID")
	}
	return supervisor.HostIDs{UID: uint32(uid), GID: uint32(gid)}, nil
}
