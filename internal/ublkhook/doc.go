// Package ublkhook sets the hooks of a ublk.Config that no user wires:
// a fake sysfs or procfs, a pretended kernel release, and a Controller in
// place of /dev/ublk-control. The tests of ublk and of its callers, and
// the examples that run the teardown against fake devices (sandboxd), use
// it; a server never does. Two hooks are not a test's, but
// internal/ublkstep's (the servers' device-daemon step): BeforeRequestStop,
// by which it learns that the daemon is being asked to stop, whatever its
// type, and StopNote, by which it adds to the Report's Note before the
// teardown logs it (Get keeps the hooks a test set when it adds them).
//
//	cfg := ublk.Config{Reserve: time.Second}
//	ublkhook.Set(&cfg, ublkhook.Hooks{SysfsRoot: tree.Root, KernelRelease: "6.8.0-45-generic"})
//	td, err := ublk.New(daemon, cfg)
package ublkhook
