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
// # In the registry
//
// runtime.go registers the runtime (one import line in
// supervisor/cli/runtimes.go) and puts the Runtime methods on Driver
// through the lifecycle's general hooks:
//
//	Probe     Driver.Preflight(ctx, false): sbx version, sbx ls
//	Prepare   (supervisor.Preparer, before the intent is journaled)
//	          CheckOptions, the refusals, SandboxName(instance, launch
//	          id), Bridge(mounts) into Box.Links (the spec's mount-bridge
//	          links), Driver.Preflight(ctx, true) when there are host
//	          ports, the ports and the scratch workspace into Box.State
//	Create    Driver.Create (create, nonce, watcher check, scoped rules)
//	Start     execArgs(name, watcher) by attach.Start (supervisor/internal/attach)
//	Remove    Driver.Remove(name, journaled ports ∪ Driver.ScopedPorts)
//	List      Driver.List, kept to ParseSandboxName(name).instance, with
//	          the instance and launch-id labels the name carries
//	Exists    the name in Driver.List
//	HostPID   0: the watcher runs in a microVM
//	ReadNonce (reconcile.NonceReader) Driver.ReadNonce: reconcile
//	          proves the nonce as it would a label (Decide states the
//	          same rule as a pure function)
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
