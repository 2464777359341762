package cli

// The runtimes of this build: one import line each. A runtime package
// registers itself (supervisor.Register) from its init; nothing else in
// the CLI names a runtime. See docs/runtimes/adding.md.
import (
	_ "deathwatch/supervisor/runtime/docker"     // docker and podman
	_ "deathwatch/supervisor/runtime/kubernetes" // Kubernetes pods
	_ "deathwatch/supervisor/runtime/native"     // Linux namespaces (Linux only)
	_ "deathwatch/supervisor/runtime/sbx"        // Docker Sandboxes (microVMs)
)
