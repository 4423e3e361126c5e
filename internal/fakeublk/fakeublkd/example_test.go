package main

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/fakeublk"
)

// fakeublkd runs the fake daemon from its flags (fakeublk.ParseArgs): the
// devices it serves in a fake sysfs, how it answers a stop, and what it
// has in flight. A flag it cannot read is an error naming it; main prints
// it and exits 2.
func Example_args() {
	cfg, err := fakeublk.ParseArgs([]string{"-sysfs", "/tmp/sys", "-devices", "0,1", "-mode", string(fakeublk.Hung), "-inflight", "3,5"})
	fmt.Println(cfg.SysRoot, len(cfg.Devices), cfg.Mode, err)
	_, err = fakeublk.ParseArgs([]string{"-inflight", "3"})
	fmt.Println(err)
	// Output:
	// /tmp/sys 2 hung <nil>
	// fakeublk: -inflight "3": want R,W
}
