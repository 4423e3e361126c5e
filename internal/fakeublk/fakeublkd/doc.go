// Command fakeublkd is a fake ublk device daemon for demos and for
// supervisors that start their device daemon as a command line: it creates
// devices in a fake sysfs tree and removes them over time after SIGTERM or
// a {"kind":"shutdown"} request on its socket. See fakeublk.ParseArgs for
// the flags. It prints "ready" once it serves.
//
//	go run ./internal/fakeublk/fakeublkd -sysfs /tmp/sys -devices 0,1 -socket /tmp/ublkd.sock
package main
