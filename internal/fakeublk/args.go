package fakeublk

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ParseArgs reads a DaemonConfig from command-line flags, for running a
// fake daemon as a command of its own (see the fakeublkd directory):
//
//	-sysfs DIR        fake sysfs root (required)
//	-devices 0,1,2    device IDs, created live (default 0)
//	-major N          major number of the disks; minor = ID (default 4000)
//	-inflight R,W     initial in-flight reads and writes (default 0,0)
//	-socket PATH      Unix socket for length-prefixed JSON requests
//	-mode M           cooperative, slow, hung or crash (default cooperative)
//	-step D           pause per device stop and delete (default 20ms; slow: 1s)
//	-crash-after N    devices removed before a crash-mode daemon dies (default 1)
//	-events FILE      event log
//	-silent           act on a shutdown request without answering it
//	-stop-with-parent stop, as on a request, once the parent process exits
func ParseArgs(args []string) (DaemonConfig, error) {
	fs := flag.NewFlagSet("fakeublkd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg DaemonConfig
	var devices, inflight, mode string
	var major uint
	fs.StringVar(&cfg.SysRoot, "sysfs", "", "fake sysfs root")
	fs.StringVar(&devices, "devices", "0", "device IDs")
	fs.UintVar(&major, "major", 4000, "major number")
	fs.StringVar(&inflight, "inflight", "0,0", "initial in-flight reads,writes")
	fs.StringVar(&cfg.Socket, "socket", "", "Unix socket path")
	fs.StringVar(&mode, "mode", string(Cooperative), "behaviour")
	fs.DurationVar(&cfg.Step, "step", 0, "pause per device step")
	fs.IntVar(&cfg.CrashAfter, "crash-after", 0, "devices removed before a crash")
	fs.StringVar(&cfg.EventLog, "events", "", "event log file")
	fs.BoolVar(&cfg.Silent, "silent", false, "never answer a shutdown request")
	fs.BoolVar(&cfg.StopWithParent, "stop-with-parent", false, "stop once the parent exits")
	if err := fs.Parse(args); err != nil {
		return cfg, fmt.Errorf("fakeublk: %w", err)
	}
	cfg.Mode = Mode(mode)
	r, w, ok := strings.Cut(inflight, ",")
	reads, err1 := strconv.ParseUint(r, 10, 64)
	writes, err2 := strconv.ParseUint(w, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return cfg, fmt.Errorf("fakeublk: -inflight %q: want R,W", inflight)
	}
	for _, f := range strings.Split(devices, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 {
			return cfg, fmt.Errorf("fakeublk: -devices %q: want IDs like 0,1,2", devices)
		}
		cfg.Devices = append(cfg.Devices, DeviceSpec{ID: id, Major: uint32(major), Minor: uint32(id), Reads: reads, Writes: writes})
	}
	return cfg.withDefaults()
}
