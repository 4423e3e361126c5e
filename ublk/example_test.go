package ublk_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/ublk"
)

func ExampleClassifyKernel() {
	for _, release := range []string{"6.8.0-45-generic", "6.1.0-27-amd64", "6.6.58", "6.14.5", "6.14.6", "6.15.0-rc7"} {
		class, _ := ublk.ClassifyKernel(release)
		fmt.Printf("%-18s %-13s may kill with live devices: %v\n", release, class, class.MayKillWithLiveDevices())
	}
	// A vendor kernel known to carry the fixes:
	class, _ := ublk.ClassifyKernel("6.8.0-88-generic", "6.8.0-8[0-9]-generic")
	fmt.Println("6.8.0-88-generic  ", class)
	// Output:
	// 6.8.0-45-generic   vulnerable    may kill with live devices: false
	// 6.1.0-27-amd64     vulnerable    may kill with live devices: false
	// 6.6.58             unaffected    may kill with live devices: true
	// 6.14.5             vulnerable    may kill with live devices: false
	// 6.14.6             exit may hang may kill with live devices: false
	// 6.15.0-rc7         fixed         may kill with live devices: true
	// 6.8.0-88-generic   fixed
}

// Operators declare their kernels in a file (or with a KernelDeclarations
// flag: -ublk-kernel=fixed=PATTERN, -ublk-kernel=@FILE); the first match
// wins, and the decision names the rule and the declaration.
func ExampleDecideKernel() {
	decls, _ := ublk.ParseKernelDeclarations(strings.NewReader(`
# Ubuntu 24.04 (noble): ABIs verified against the CVE-2025-37906 USN
fixed       6.8.0-1[0-9][0-9]-generic
vulnerable  6.8.0-*-generic
`), "kernels")
	for _, release := range []string{"6.8.0-101-generic", "6.8.0-45-generic", "5.14.0-427.13.1.el9_4.x86_64", "6.14.7"} {
		d, _ := ublk.DecideKernel(release, decls...)
		fmt.Println(d)
	}
	// Output:
	// kernel "6.8.0-101-generic": fixed (declared): fixed 6.8.0-1[0-9][0-9]-generic (kernels:3)
	// kernel "6.8.0-45-generic": vulnerable (declared): vulnerable 6.8.0-*-generic (kernels:4)
	// kernel "5.14.0-427.13.1.el9_4.x86_64": vulnerable (vendor build, not declared)
	// kernel "6.14.7": exit may hang (fix without dd24f87f65c9)
}

// The step against a daemon that stops its two devices when asked; here a
// fake sysfs tree stands in for /sys and the daemon is in-process
// (DaemonFuncs), as for a Go server that serves its ublk queues itself.
func ExampleTeardown_Run() {
	sys, _ := os.MkdirTemp("", "sys")
	defer os.RemoveAll(sys)
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
	td, err := ublk.New(daemon, ublkhook.With(ublk.Config{}, ublkhook.Hooks{SysfsRoot: sys, KernelRelease: "6.8.0-45-generic"}))
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
