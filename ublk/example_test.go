package ublk_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/ublk"
)

// Operators declare their kernels in a file (or with a KernelDeclarations
// flag: -ublk-kernel=fixed=PATTERN, -ublk-kernel=@FILE); the first match
// wins, and the decision names the rule and the declaration. Releases the
// operator did not declare are judged by the kernel.org history.
func ExampleLoadKernelDeclarations() {
	dir, _ := os.MkdirTemp("", "kernels")
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "kernels")
	_ = os.WriteFile(file, []byte(`# Ubuntu 24.04 (noble): ABIs verified against the CVE-2025-37906 USN
fixed       6.8.0-1[0-9][0-9]-generic
vulnerable  6.8.0-*-generic
`), 0o644)
	kernels, err := ublk.LoadKernelDeclarations(file)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, release := range []string{"6.8.0-101-generic", "6.8.0-45-generic", "5.14.0-427.13.1.el9_4.x86_64", "6.14.7", "6.6.58"} {
		cfg := ublk.Config{Kernels: kernels}
		ublkhook.Set(&cfg, ublkhook.Hooks{KernelRelease: release}) // pretend the node runs release
		td, err := ublk.New(nil, cfg)
		if err != nil {
			fmt.Println(err)
			return
		}
		d := td.KernelDecision()
		fmt.Printf("%-29s %-13s %-13s may kill with live devices: %v\n", d.Release, d.Class, d.Rule, d.Class.MayKillWithLiveDevices())
	}
	// Output:
	// 6.8.0-101-generic             fixed         declared      may kill with live devices: true
	// 6.8.0-45-generic              vulnerable    declared      may kill with live devices: false
	// 5.14.0-427.13.1.el9_4.x86_64  vulnerable    vendor_build  may kill with live devices: false
	// 6.14.7                        exit_may_hang exit_may_hang may kill with live devices: false
	// 6.6.58                        unaffected    before_bug    may kill with live devices: true
}

// The step against a daemon that stops its two devices when asked; here a
// fake sysfs tree stands in for /sys and an empty directory for /proc, no
// process holding the fake disks (the test hook ublkhook.With; a server
// leaves it out), and the daemon is in-process (DaemonFuncs), as for a Go
// server that serves its ublk queues itself.
func ExampleNew() {
	sys, _ := os.MkdirTemp("", "sys")
	defer os.RemoveAll(sys)
	proc, _ := os.MkdirTemp("", "proc")
	defer os.RemoveAll(proc)
	tree, _ := fakeublk.NewTree(sys)
	for id := range 2 {
		_ = tree.AddDevice(fakeublk.DeviceSpec{ID: id, Major: 4000, Minor: uint32(id), Reads: 2})
	}
	exited := make(chan struct{})
	daemon := ublk.DaemonFuncs{
		StopFunc: func(context.Context) error {
			go func() { // the server's own shutdown: STOP_DEV, join queues, DEL_DEV
				for id := range 2 {
					_ = tree.DeleteDevice(id)
				}
				close(exited)
			}()
			return nil
		},
		WaitFunc: func(ctx context.Context) error {
			select {
			case <-exited:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}
	td, err := ublk.New(daemon, ublkhook.With(ublk.Config{}, ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: proc, KernelRelease: "6.8.0-45-generic"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	report, err := td.Stop(ctx)
	fmt.Println("error:", err)
	fmt.Println("verdict:", report.Verdict)
	for _, d := range report.Devices {
		fmt.Printf("ublkb%d: %s -> %s, in flight %d -> %d\n", d.ID, d.Initial.State(), d.Final.State(),
			d.InflightBefore.Total(), d.InflightAfter.Total())
	}
	// Output:
	// error: <nil>
	// verdict: stopped
	// ublkb0: live -> gone, in flight 2 -> 0
	// ublkb1: live -> gone, in flight 2 -> 0
}
