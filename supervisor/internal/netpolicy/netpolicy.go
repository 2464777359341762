// Package netpolicy holds what the supervisor says of a box's network
// on every runtime: the bridge's warning and the refusal of the host's.
package netpolicy

// BridgeWarning is the line exec says once a box of --network
// bridge exists: an engine's bridge routes the box to the host itself,
// so what --network host opens on the loopback, a bridge opens on every
// other address.
const BridgeWarning = "warning: --network bridge: the box reaches the host through the engine's bridge: every host service listening on a non-loopback address (or on all addresses: 0.0.0.0, ::), and every network the host routes to; use --network none unless the agent needs them"

// HostRefusal is why a box is refused --network host unless the
// caller passes --allow-host-network, on every runtime: loopback ports
// and abstract unix sockets belong to the network namespace, not to the
// file system, so neither a minimal root nor a container image hides
// them (the agent's Landlock domain scopes the sockets where the kernel
// has ABI 6).
const HostRefusal = "--network host: the box would share the host's network namespace, so the agent could connect to every port on its loopback, and on a kernel without Landlock ABI 6 to every abstract unix socket of the host (X11's @/tmp/.X11-unix, D-Bus, containerd, systemd); pass --allow-host-network to accept that, or use --network none"
