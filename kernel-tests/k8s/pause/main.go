// Command pause is the sandbox ("pause") container of the test cluster's
// pods: it holds the pod's namespaces open, reaps what is reparented to it,
// and exits 0 on SIGINT or SIGTERM. Built static (CGO_ENABLED=0) into the
// image localhost/deathwatch/pause:1 by kernel-tests/k8s/cluster.sh.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
