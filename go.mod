module deathwatch

go 1.26.0

require (
	github.com/alecthomas/kong v1.17.0 // indirect
	github.com/containerd/cgroups/v3 v3.1.3 // indirect
	github.com/creack/pty v1.1.24 // indirect
	github.com/moby/sys/userns v0.1.0 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
