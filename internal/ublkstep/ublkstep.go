package ublkstep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/follow"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/ublk"
)

// ublkDefaultReserve is the reserve a ublk.Teardown keeps for its stages
// when its Config.Reserve is zero (ublk's default, which
// TestUblkDefaultReserveIsUblks pins), which the stages are laid out from
// when the reserve reads zero or below: the plan keeps no time of its own
// for the step then, and the stages still need time before SIGKILL to
// stop the devices in the safe order.
const ublkDefaultReserve = 10 * time.Second

// Teardown is a ublk teardown step whose reserve is a live value: its
// Phase's Reserve in the drain plan, and Config.Reserve of the
// ublk.Teardown each Stop runs. It is a drain.Step with Tighten.
type Teardown struct {
	daemon  ublk.Daemon
	cfg     ublk.Config
	reserve deadline.Reserve
	// watched is whether there is a daemon, whose stop request the step
	// sees (asked): only then is a deadline told to the stages later
	// (Tighten).
	watched bool
	// base is the ublk.Teardown New built, with the reserve's value at
	// start: what Phase, LastResort and Kernel describe, and what a Stop
	// whose reserve has that value runs.
	base *ublk.Teardown
	cur  atomic.Pointer[stop] // the Stop in progress, for Tighten
}

// New checks c (ublk.New's errors, naming the field) with c.Reserve set to
// reserve's value now, and returns the step. reserve must not be nil nor
// read below zero now: the drain's plan refuses such a reserve when it is
// made (deadline.NewPlan), and New names it, not c.Reserve, which is not
// used. A reserve that reads zero reserves nothing in the plan; the
// stages are then laid out from ublk's default (a Config with no
// Reserve), as at a Stop (see Stop). The daemon is given to ublk as it is
// (ublk reads a *ublk.Process's or a *ublk.Socket's process by its type),
// and the step learns when it is asked to stop through a hook of c's
// (ublkhook.Hooks.BeforeRequestStop), the others c has kept: see Tighten.
func New(daemon ublk.Daemon, c ublk.Config, reserve deadline.Reserve) (*Teardown, error) {
	if reserve == nil {
		return nil, errors.New("ublkstep: New: the reserve is nil")
	}
	r := reserve()
	if r < 0 {
		return nil, fmt.Errorf("ublkstep: New: the reserve must not be negative (deadline.NewPlan refuses it in the drain's plan), got %v", r)
	}
	c.Reserve = r
	t := &Teardown{daemon: daemon, reserve: reserve, watched: daemon != nil}
	h := ublkhook.Get(&c)
	h.BeforeRequestStop = t.asked
	h.StopNote = t.note
	ublkhook.Set(&c, h)
	t.cfg = c
	base, err := ublk.New(daemon, c)
	if err != nil {
		return nil, err
	}
	t.base = base
	return t, nil
}

// asked tells the Stop in progress that its daemon is being asked to stop
// (stop.asked). It is the hook ublk calls just before Daemon.RequestStop,
// of whatever type the daemon is: a wrapper that saw the request (the
// first version of this, for a ublk.DaemonFuncs alone) would hide a
// *ublk.Socket's or a *ublk.Process's process from ublk, which reads it by
// the daemon's type, so sandboxd's *ublk.Socket was told every move at
// once (docs/faults.md row 1121).
func (t *Teardown) asked() {
	if s := t.cur.Load(); s != nil {
		s.asked()
	}
}

// note is what the Stop in progress says of itself in the Report's Note
// (stop.note), given to ublk as it ends the Report, before its log line
// (ublkhook.Hooks.StopNote): added after, it was missing from that line
// (docs/faults.md row 2640).
func (t *Teardown) note() string {
	s := t.cur.Load()
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.note
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

// Stop runs ublk.Teardown.Stop with Config.Reserve the reserve's value now
// (zero for one below zero: the stages then laid out from ublk's default),
// so that the stages inside ctx's window keep the shares of the reserve the
// plan gave the step, and the holder wait the rest. A reserve in use that
// shortens while it runs (a shorter deletion read at a later SIGTERM, a
// second one) is followed with the deadline Tighten moves earlier: see
// Tighten. A Teardown ublk.New cannot build then (it reads the kernel's
// release again) leaves the one built at start, whose reserve is the
// start's; its error is in the Report's Note.
func (t *Teardown) Stop(ctx context.Context) (*ublk.Report, error) {
	s := &stop{log: t.cfg.Logger, watched: t.watched}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	// s is Tighten's from before the reserve and ctx's deadline are read:
	// a move before is in both, one after waits for them on s.mu.
	s.mu.Lock()
	t.cur.Store(s)
	defer t.cur.CompareAndSwap(s, nil)
	td, buildErr := t.base, error(nil)
	if r := t.reserveInUse(); r != t.cfg.Reserve {
		c := t.cfg
		c.Reserve = r
		if built, err := ublk.New(t.daemon, c); err != nil {
			buildErr = err
		} else {
			td = built
		}
	}
	s.td, s.reserve = td, td.Phase().Reserve() // ublk's default for a reserve of zero
	if buildErr != nil {
		s.note = "the teardown's stages laid out from the reserve at start, not the grace in use: " + buildErr.Error()
	}
	if dl, ok := ctx.Deadline(); ok {
		s.told.Move(dl)
	}
	s.mu.Unlock()

	rep, err := td.Stop(toldContext{ctx, &s.told})
	s.finish(rep)
	return rep, err
}

// reserveInUse is the reserve's value now, one below zero read as zero
// (deadline.Reserve): the plan keeps no time of its own for the step, and
// the stages are laid out from ublk's default, as a Config with no
// Reserve. Passed on raw, ublk.New refused it, and the Stop ran the
// Teardown built at start, whose stages kept the reserve then (an hour's
// grace's 30 s) in a window of a few seconds (docs/faults.md row 2761).
func (t *Teardown) reserveInUse() time.Duration { return max(t.reserve(), 0) }

// stagesReserve is the reserve the stages of a Stop begun now are laid out
// from: the reserve in use, or ublk's default where it reads zero or
// below. Tighten compares it with the one the Stop in progress laid them
// out from; taken as the reserve's value, zero told a moved deadline to
// the stages at that deadline, and a negative one after it: the holder
// wait went on into the deadline and the stages got no time, and a Stop
// begun with zero, laid out from ublk's 10 s, was told a move with a
// reserve of 3 s at once (docs/faults.md row 2762).
func (t *Teardown) stagesReserve() time.Duration {
	if r := t.reserveInUse(); r > 0 {
		return r
	}
	return ublkDefaultReserve
}

// Tighten moves the deadline of the Stop in progress earlier, to dl, and
// reports whether it moved it; false with none, or with dl no earlier than
// the deadline it has.
//
// The stages of a Stop are laid out from the reserve it took when it
// began. When the reserve in use is shorter now (the grace in use
// shortened with the budget that moved dl: a deletion with a shorter grace
// read after the Stop began) and the daemon has not been asked to stop,
// dl is told to the stages when only that reserve is left before it, or
// when the daemon is asked to stop if that is sooner, and the holder wait
// goes on until then: a window no longer than the stages' reserve is
// shared among them in their 3:2:3:2 proportion (deadline.Split), the
// layout a Teardown built with the reserve in use makes of it. Told at
// once, the reserve taken at the start (an hour's grace's 30 s) filled the
// new window (the 27 s of a 30 s deletion): the holder wait ended at once,
// the last resort ran, and a disk held by kernel state was left with the
// daemon never asked to stop (docs/faults.md row 1120). Otherwise dl is
// told at once (ublk.Teardown.Tighten): once the daemon was asked, the
// holder wait is over, and the daemon's own stop, the control fallback and
// the kill share what is left in the proportion of the larger reserve,
// which gives the fallback more of it than the reserve in use would. So
// it is too with no daemon (New's nil), which is never asked. The request
// is seen whatever the daemon's type (sandboxd's *ublk.Socket as the
// supervisor's ublk.DaemonFuncs: see New). Either way the Report's Deadline
// is dl, and a "reserve in use" step says when a move was told later. A
// reserve in use that reads zero or below counts here, as at a Stop, as
// ublk's default (10 s): the stages still need that time before dl.
func (t *Teardown) Tighten(dl time.Time) bool {
	s := t.cur.Load()
	if s == nil || dl.IsZero() {
		return false
	}
	return s.tighten(dl, t.stagesReserve())
}

// LastResort is the ublk teardown's (ublk.Teardown.LastResort).
func (t *Teardown) LastResort() bool { return t.base.LastResort() }

// KernelDecision is the ublk teardown's (ublk.Teardown.KernelDecision).
func (t *Teardown) KernelDecision() ublk.KernelDecision { return t.base.KernelDecision() }

// stop is a Stop in progress: the ublk.Teardown it runs, the reserve that
// one lays its stages out from, and the deadlines Tighten gave it.
type stop struct {
	log     *slog.Logger
	watched bool // the daemon's stop request is seen (asked)

	// told is the deadline td has: ctx's at the start, or the earliest
	// told since (toldContext's Deadline); none: no deadline.
	told follow.Deadline

	mu        sync.Mutex // guards what follows; never held while td is called (td takes locks of its own)
	td        *ublk.Teardown
	reserve   time.Duration
	pending   time.Time   // a deadline earlier than told, that timer tells; zero: none
	timer     *time.Timer // tells pending
	over      bool        // td.Stop returned
	requested bool        // td asked the daemon to stop
	steps     []ublk.StepResult
	note      string // the Stop's own end of the Report's Note ("" for none): Teardown.note
}

// tighten moves the Stop's deadline earlier to dl, with r the reserve the
// stages would be laid out from now (Teardown.stagesReserve; see
// Teardown.Tighten), and reports whether it moved it.
func (s *stop) tighten(dl time.Time, r time.Duration) bool {
	s.mu.Lock()
	if s.over || !earlier(dl, s.deadline()) {
		s.mu.Unlock()
		return false
	}
	now := time.Now()
	if tellAt := dl.Add(-r); s.watched && !s.requested && r < s.reserve && now.Before(tellAt) {
		s.pending = dl
		if s.timer != nil {
			s.timer.Stop()
		}
		s.timer = time.AfterFunc(tellAt.Sub(now), s.tellPending)
		s.steps = append(s.steps, ublk.StepResult{Name: "reserve in use", Start: now, Result: fmt.Sprintf(
			"%v, the stages laid out from %v: the deadline %s told to them at %s, when only %v is left; the holder wait goes on until then",
			r, s.reserve, dl.Format(time.RFC3339Nano), tellAt.Format(time.RFC3339Nano), r)})
		laidOut := s.reserve
		s.mu.Unlock()
		s.log.Warn("ublk: the step's deadline moves earlier, with a reserve in use shorter than the one its stages were laid out from: told to them when only that reserve is left, the holder wait going on until then",
			"deadline", dl, "reserve", r, "laid_out_from", laidOut, "told_at", tellAt)
		return true
	}
	s.tell(dl)
	td := s.td
	s.mu.Unlock()
	td.Tighten(dl) // before td's Stop registers, it reads dl as its ctx's deadline (toldContext)
	return true
}

// tellPending tells td the deadline tighten put off.
func (s *stop) tellPending() {
	s.mu.Lock()
	dl, td := s.takePending()
	s.mu.Unlock()
	if !dl.IsZero() {
		td.Tighten(dl)
	}
}

// asked notes that td asked the daemon to stop: its holder wait and last
// resort are over, and a deadline put off is told now, so that the stages
// left share all the time left (see Teardown.Tighten).
func (s *stop) asked() {
	s.mu.Lock()
	s.requested = true
	dl, td := s.takePending()
	s.mu.Unlock()
	if !dl.IsZero() {
		td.Tighten(dl) // from td's run, outside its lock: the request then is made in the new layout
	}
}

// takePending returns the deadline put off (zero: none) as told, and td to
// tell it. The caller holds s.mu, and tells it once it no longer does.
func (s *stop) takePending() (time.Time, *ublk.Teardown) {
	dl := s.pending
	if s.over || dl.IsZero() {
		return time.Time{}, nil
	}
	s.tell(dl)
	return dl, s.td
}

// tell makes dl the deadline told to td, a deadline put off no longer
// pending. The caller holds s.mu, and tells td once it no longer does.
func (s *stop) tell(dl time.Time) {
	s.told.Move(dl)
	s.pending = time.Time{}
	if s.timer != nil {
		s.timer.Stop()
	}
}

// deadline is the Stop's deadline, told or not; zero: none. The caller
// holds s.mu.
func (s *stop) deadline() time.Time {
	if !s.pending.IsZero() {
		return s.pending
	}
	dl, _ := s.told.Get()
	return dl
}

// finish ends the Stop: a deadline not told yet (td's Stop ended first) is
// the Report's Deadline, and the "reserve in use" steps join its Steps.
func (s *stop) finish(rep *ublk.Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.over = true
	if s.timer != nil {
		s.timer.Stop()
	}
	if dl := s.deadline(); !dl.IsZero() && earlier(dl, rep.Deadline) {
		rep.Deadline = dl
	}
	rep.Steps = append(rep.Steps, s.steps...)
}

// earlier reports whether a is earlier than b, a zero b being no deadline.
func earlier(a, b time.Time) bool { return b.IsZero() || a.Before(b) }

// toldContext is the context a Stop runs ublk.Teardown.Stop with: its
// Deadline is the one told to the stages (from which ublk lays them out
// when its Stop begins), not a deadline tighten put off, which the
// caller's context reports; it ends when the caller's does.
type toldContext struct {
	context.Context
	told *follow.Deadline
}

func (c toldContext) Deadline() (time.Time, bool) { return c.told.Get() }
