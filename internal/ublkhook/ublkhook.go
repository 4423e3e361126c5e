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
	// directory before the holders scan reads it: a test makes the scan as
	// slow as a loaded node's with it (seconds for a few hundred
	// processes), in virtual time.
	BeforeProcess func(dir string)
}

// Set stores h in cfg, which must be a *ublk.Config; package ublk
// installs it when it is initialised, so it is set wherever a ublk.Config
// exists. It panics on any other type.
var Set func(cfg any, h Hooks)

// With returns cfg, a ublk.Config, with h set (see Set), for use in an
// expression: ublk.New(d, ublkhook.With(ublk.Config{...}, ublkhook.Hooks{...})).
func With[C any](cfg C, h Hooks) C {
	Set(&cfg, h)
	return cfg
}
