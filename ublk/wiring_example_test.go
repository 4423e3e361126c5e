package ublk_test

import (
	"context"
	"log"
	"log/slog"
	"os/exec"

	"github.com/drainkit/drainkit/ublk"
)

// The wiring of the package documentation: the device daemon is a child
// process, the operator declared the vendor kernels they verified, and the
// Teardown goes into drain.Config.Steps. (Compiled, not run: it needs the
// daemon and the declarations file.)
func Example_wiring() {
	ublkd := exec.Command("/usr/local/bin/ublkd") // the device daemon, started by the server
	if err := ublkd.Start(); err != nil {
		log.Fatal(err)
	}
	logger := slog.Default()

	daemon, err := ublk.FindProcess(ublkd.Process.Pid)                   // or &ublk.Socket{Path: path, Process: daemon}
	kernels, err := ublk.LoadKernelDeclarations("/etc/drainkit/kernels") // vendor kernels you verified
	td, err := ublk.New(daemon, ublk.Config{Kernels: kernels, Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	_ = td // drain.Config{Steps: []drain.Step{td}}
}

// A daemon that answers AgentENV's shutdown request on its socket, stopped
// by hand in the teardown phase rather than as a drain step. (Compiled, not
// run.)
func Example_socket() {
	ublkd := exec.Command("/usr/local/bin/ublkd")
	if err := ublkd.Start(); err != nil {
		log.Fatal(err)
	}
	logger := slog.Default()
	ctx := context.Background()

	proc, _ := ublk.FindProcess(ublkd.Process.Pid)               // pidfd: SIGTERM, exit seen without reaping
	sock := &ublk.Socket{Path: "/run/ublkd.sock", Process: proc} // AgentENV's {"kind":"shutdown"} request
	td, err := ublk.New(sock, ublk.Config{Logger: logger})       // the zero Config is the safe default
	// teardown phase:
	report, err := td.Stop(ctx) // or as a drain step: drain.Config{Steps: []drain.Step{td}} (critical)
	if err != nil {
		log.Print(err) // *ublk.HeldError, *ublk.UnsafeError, ... : the report says which device and why
	}
	_ = report
}
