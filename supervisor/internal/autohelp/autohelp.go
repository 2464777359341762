// Package autohelp says what --runtime auto does with the runtimes of
// this build, and which one the demo and prove-deathwatch use by
// default.
package autohelp

import (
	"strings"

	"deathwatch/supervisor"
)

// Help says in words what --runtime auto does with the runtimes of
// this build, e.g. "the first of podman, docker that is rootless and has
// the image, else native, else a rootful engine with the image and
// --allow-rootful".
func Help() string {
	var daemons, others []string
	for _, n := range supervisor.AutoOrder() {
		if d, _ := supervisor.Lookup(n); d.Daemon {
			daemons = append(daemons, n)
		} else {
			others = append(others, n)
		}
	}
	var parts []string
	if len(daemons) > 0 {
		parts = append(parts, "the first of "+strings.Join(daemons, ", ")+" that is rootless and has the image")
	}
	if len(others) > 0 {
		parts = append(parts, strings.Join(others, " or "))
	}
	if len(daemons) > 0 {
		parts = append(parts, "a rootful engine with the image and --allow-rootful")
	}
	if len(parts) == 0 {
		return "no runtime in this build"
	}
	return strings.Join(parts, ", else ")
}

// Local is the first runtime in auto's order that has no daemon
// behind it (native: it needs no image), else the first in auto's
// order; the demo and prove-deathwatch use it by default.
func Local() string {
	order := supervisor.AutoOrder()
	for _, n := range order {
		if d, _ := supervisor.Lookup(n); !d.Daemon {
			return n
		}
	}
	if len(order) > 0 {
		return order[0]
	}
	return ""
}
