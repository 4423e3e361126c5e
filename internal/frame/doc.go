// Package frame is the wire form of a ublk daemon's control socket as
// AgentENV's uvm-ublk-daemon speaks it: one JSON message per frame, preceded
// by its length as a 4-byte big-endian integer. The ublk package's Socket
// daemon and the fake daemons of the tests share it, so both sides of every
// test speak exactly the same bytes.
package frame
