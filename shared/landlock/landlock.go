// Package landlock is what the watcher and doctor agree on about the
// kernel's Landlock: the ABIs a box's scopes and write limits need and
// how to ask for the kernel's.
package landlock

// ScopeABI is the first ABI with scopes (Linux 6.12): the watcher puts
// the agent in a domain that scopes abstract unix sockets and signals
// where the kernel has it, and a kernel below loses only that layer.
const ScopeABI = 6

// WriteABI is the first ABI whose rulesets handle every way of writing
// (Linux 6.2: truncate is ABI 3, a rename or link across folders ABI
// 2): the watcher limits the agent's writes to the box's writable
// paths where the kernel has it. Below it the box loses the write
// limits whole (a ruleset of ABI 1 refuses every rename across
// folders; one of ABI 2 cannot stop a truncate), said in one line.
const WriteABI = 3
