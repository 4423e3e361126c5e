package daemonhold_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/drainkit/drainkit/examples/internal/daemonhold"
	"github.com/drainkit/drainkit/ublk"
)

// sandboxd's ublk step left device 0 live on a vulnerable kernel: with its Report
// written, sandboxd waits for its daemon's exit before it exits.
func Example() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	rep := &ublk.Report{Kernel: "6.8.0-45-generic", KernelClass: ublk.KernelVulnerable,
		Devices: []ublk.DeviceReport{{ID: 0, Verdict: ublk.VerdictLeftLive}}}
	pid := 4242
	wait := func(context.Context) error { return nil } // the daemon's exit, here at once

	if daemonhold.Needed(rep) {
		daemonhold.Wait(logger, "sandboxd", "the ublk step", rep, pid, wait)
	}
	// Output:
	// level=ERROR msg="sandboxd: not exiting while the device daemon serves live devices: its death may crash the host on this kernel, and it dies with this process; waiting for it to exit (the pod's SIGKILL ends the wait)" daemon_pid=4242 devices=[0] kernel=6.8.0-45-generic kernel_class=vulnerable
	// level=INFO msg="sandboxd: the device daemon exited; exiting" daemon_pid=4242 err=<nil>
}
