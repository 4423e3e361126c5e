// Package listening tells whether a socket listens on an address in the
// network namespace of the process's main thread, from the kernel's socket tables
// (/proc/net/tcp, tcp6 and unix on Linux), without connecting to it: a
// probe would be a connection, and a log line, on the server it finds.
//
//	if on, known := listening.On(peer.LocalAddr); known && on { ... }
//
// It reads the tables once per call and returns at once; elsewhere than
// Linux, and for an address it cannot look up, it says it does not know.
package listening
