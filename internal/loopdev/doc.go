// Package loopdev attaches real loop devices for tests: a real block device
// whose holders (an open fd, a mount, swap) the holders scan and the ublk
// step must see, standing for a ublk disk. One helper for the tests of
// internal/blockdev, ublk and the supervisor example.
//
//	node, dev := loopdev.Attach(t) // skips when not root or without /dev/loop-control
//	f, _ := os.Open(node)          // now f's process holds dev
package loopdev
