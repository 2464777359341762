// Package sbx is the Docker Sandboxes runtime: the agent runs in a
// microVM driven by the `sbx` CLI (sbx create, sbx exec -i, sbx policy,
// sbx rm --force). The sandbox's PID 1 is its own init, so the watcher
// runs under `sbx exec -i` with the control stream on the exec's
// stdin/stdout and makes its own PID namespace for the agent.
//
// It builds for linux, darwin and windows (the hosts that run Docker
// Sandboxes). All of it is pure but Driver (driver.go), which runs the
// CLI behind one seam (Runner): the argv builders (args.go), the one
// parser of `sbx ls` (list.go), the sandbox-scope probe of `sbx policy`
// (policy.go), and the run-scoped name, nonce and ownership decision
// (owner.go). Every fact about `sbx` it relies on is the documentation's
// or, where that is silent, the strict choice the kernel tests' emulator
// (kernel-tests/ktest/sbxemu) also makes.
//
// # Plugging into the registry
//
// The Runtime methods are thin over Driver (driver.go):
//
//	Probe    Driver.Preflight(ctx, false): sbx version, sbx ls
//	Create   CheckOptions, then SandboxName(instance, launch id) (the
//	         lifecycle must take the name from the runtime before it
//	         journals), Bridge(mounts) (its links go into the spec),
//	         Driver.Preflight(ctx, true) when there are host ports, then
//	         Driver.Create (create, nonce, watcher check, scoped rules),
//	         with the ports in Box.State before the first call
//	Start    execArgs(name, watcher) with the pipes and process group of
//	         the docker runtime's Start
//	Remove   Driver.Remove(name, journaled ports ∪ Driver.ScopedPorts)
//	List     Driver.List, kept to ParseSandboxName(name).instance
//	Exists   the name in Driver.List
//	HostPID  0: the watcher runs in a microVM
//	reconcile: Decide, with the nonce from Driver.ReadNonce
package sbx

// Name is what --runtime takes.
const Name = "sbx"

// Agent is the `sbx create AGENT` the sandbox is created for. The
// supervisor never starts that agent (the watcher runs through sbx
// exec); "shell" is the documented agent without an AI harness.
const Agent = "shell"

// ExecUser is the user `sbx exec` runs the watcher as: root inside the
// VM, so that it can make a PID namespace and drop to the agent uid.
// sbx exec's own default user is the template's unprivileged one.
const ExecUser = "root"

// DefaultWatcherPath is where a template carries the watcher
// (image/README.md).
const DefaultWatcherPath = "/usr/local/bin/watcher"
