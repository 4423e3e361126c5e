package ublkstep

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/ublk"
)

// Teardown is a ublk teardown step whose reserve is a live value: its
// Phase's Reserve in the drain plan, and Config.Reserve of the
// ublk.Teardown each Stop runs. It is a drain.Step with Tighten.
type Teardown struct {
	daemon  ublk.Daemon
	cfg     ublk.Config
	reserve deadline.Reserve
	// base is the ublk.Teardown New built, with the reserve's value at
	// start: what Phase, LastResort and Kernel describe, and what a Stop
	// whose reserve has that value runs.
	base *ublk.Teardown
	cur  atomic.Pointer[ublk.Teardown] // the Stop in progress, for Tighten
}

// New checks c (ublk.New's errors, naming the field) with c.Reserve set to
// reserve's value now, and returns the step. reserve must not be nil; the
// Config's own Reserve is not used.
func New(daemon ublk.Daemon, c ublk.Config, reserve deadline.Reserve) (*Teardown, error) {
	if reserve == nil {
		return nil, errors.New("ublkstep: New: the reserve is nil")
	}
	c.Reserve = reserve()
	base, err := ublk.New(daemon, c)
	if err != nil {
		return nil, err
	}
	return &Teardown{daemon: daemon, cfg: c, reserve: reserve, base: base}, nil
}

// Phase is the ublk teardown's phase (named "ublk", critical) with the live
// reserve as its Reserve.
func (t *Teardown) Phase() deadline.Phase {
	ph := t.base.Phase()
	ph.Reserve = t.reserve
	return ph
}

// Run is Stop for drain (drain.Step): the *ublk.Report is the step's
// detail.
func (t *Teardown) Run(ctx context.Context) (any, error) { return t.Stop(ctx) }

// Stop runs ublk.Teardown.Stop with Config.Reserve the reserve's value now,
// so that the stages inside ctx's window keep the shares of the reserve the
// plan gave the step, and the holder wait the rest. The value of a Stop is
// taken when it starts: a grace in use that shortens while it runs (a
// second, shorter deletion read then) moves its deadline earlier (Tighten)
// but not its reserve. A Teardown ublk.New cannot build then (it reads the
// kernel's release again) leaves the one built at start, whose reserve is
// the start's; its error is in the Report's Note.
func (t *Teardown) Stop(ctx context.Context) (*ublk.Report, error) {
	td, buildErr := t.base, error(nil)
	if r := t.reserve(); r != t.cfg.Reserve {
		c := t.cfg
		c.Reserve = r
		if built, err := ublk.New(t.daemon, c); err != nil {
			buildErr = err
		} else {
			td = built
		}
	}
	t.cur.Store(td) // a Tighten before td's Stop runs is in ctx's Deadline (drain's, followBudget's)
	defer t.cur.CompareAndSwap(td, nil)
	rep, err := td.Stop(ctx)
	if buildErr != nil {
		note := "the teardown's stages laid out from the reserve at start, not the grace in use: " + buildErr.Error()
		if rep.Note != "" {
			note = rep.Note + "; " + note
		}
		rep.Note = note
	}
	return rep, err
}

// Tighten is ublk.Teardown.Tighten of the Stop in progress; false with
// none.
func (t *Teardown) Tighten(dl time.Time) bool {
	td := t.cur.Load()
	return td != nil && td.Tighten(dl)
}

// LastResort is the ublk teardown's (ublk.Teardown.LastResort).
func (t *Teardown) LastResort() bool { return t.base.LastResort() }

// KernelDecision is the ublk teardown's (ublk.Teardown.KernelDecision).
func (t *Teardown) KernelDecision() ublk.KernelDecision { return t.base.KernelDecision() }
