package ublkhook

import (
	"context"

	"github.com/drainkit/drainkit/internal/ublkctl"
)

// Hooks replace the parts of the system a ublk teardown reads and acts on.
// The zero value changes nothing.
type Hooks struct {
	// SysfsRoot is where sysfs is mounted; "" means "/sys".
	SysfsRoot string
	// ProcfsRoot is where procfs is mounted, for the holders scan; ""
	// means "/proc".
	ProcfsRoot string
	// KernelRelease is the release to classify instead of the running
	// kernel's (uname -r); "" means the running kernel's.
	KernelRelease string
	// OpenControl supplies the control fallback's Controller instead of
	// opening /dev/ublk-control; it is called when the fallback is first
	// needed, and the Controller is closed at the end of the step.
	OpenControl func(ctx context.Context) (ublkctl.Controller, error)
	// BeforeProcess, when not nil, is called with each process's procfs
	// directory before the holders scan reads it, and with each whose
	// cgroup the pass that tells another server's devices reads ("self"
	// first): a test makes the scan as slow as a loaded node's with it
	// (seconds for a few hundred processes), in virtual time.
	BeforeProcess func(dir string)
	// BeforeRequestStop, when not nil, is called as the teardown asks its
	// daemon to stop, just before Daemon.RequestStop, from the Stop's own
	// goroutine; not with no daemon, nor when the daemon is never asked.
	// internal/ublkstep learns so that its holder wait is over, whatever
	// the daemon's type: wrapped to be seen, a *ublk.Socket or a
	// *ublk.Process would no longer be known by its type, and the
	// teardown would lose its process (docs/faults.md row 1121).
	BeforeRequestStop func()
	// StopNote, when not nil, is called as the teardown's Stop ends,
	// before the Report is logged and recorded; what it returns, when not
	// empty, ends the Report's Note ("; " after the Note's own).
	// internal/ublkstep says with it what only the step knows of the Stop
	// (its stages laid out from the reserve at start), so that the log
	// line says it too (docs/faults.md row 2640).
	StopNote func() string
}

// Set stores h in cfg, which must be a *ublk.Config; package ublk
// installs it when it is initialised, so it is set wherever a ublk.Config
// exists. It panics on any other type.
var Set func(cfg any, h Hooks)

// Get returns the hooks stored in cfg, which must be a *ublk.Config (the
// zero Hooks when none were set), so that a caller adds one of its own and
// keeps the rest: Set replaces them all. Package ublk installs it as it
// does Set; it panics on any other type.
var Get func(cfg any) Hooks

// With returns cfg, a ublk.Config, with h set (see Set), for use in an
// expression: ublk.New(d, ublkhook.With(ublk.Config{...}, ublkhook.Hooks{...})).
func With[C any](cfg C, h Hooks) C {
	Set(&cfg, h)
	return cfg
}
