// Package landlock is what the watcher and doctor agree on about the
// kernel's Landlock: the ABI a box's scopes need and how to ask for the
// kernel's.
package landlock

// ScopeABI is the first ABI with scopes (Linux 6.12): the watcher puts
// the agent in a domain that scopes abstract unix sockets and signals
// where the kernel has it, and a kernel below loses only that layer.
const ScopeABI = 6
