// Package shared holds what the supervisor and the watcher must agree on
// byte for byte: the control-stream framing and its payloads, the launch
// spec, the exit-status table, the label keys and the version.
//
// It depends on nothing beyond the standard library so that the PID-1
// binary stays small.
package shared

// Version is the release of both binaries.
const Version = "0.1.0"

// ProtocolVersion is carried in the hello frame. A watcher refuses a
// hello whose version it does not speak.
const ProtocolVersion = 1
