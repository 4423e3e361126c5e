// Package loopdev attaches real loop devices for tests: a real block device
// whose holders (an open fd, a mount, swap) the holders scan and the ublk
// step must see, standing for a ublk disk; and a holder, a child process
// that keeps one open as a VMM keeps its disk (Hold), maps it with its fd
// closed (Map), or keeps it among an io_uring's registered files with its
// fd closed (Ring), with its ring's lock then kept held so the kernel lists
// none of them (RingLocked). One helper for the tests of
// internal/blockdev, ublk and the supervisor example.
//
//	node, dev := loopdev.Attach(t) // skips when not root or without /dev/loop-control
//	vmm, stdin := loopdev.Hold(t, node) // now vmm's process holds dev
//	stdin.Close()                       // and now it exits
//
// A test binary that calls Hold, Map or Ring calls MainIfHolder first in
// its TestMain.
package loopdev
