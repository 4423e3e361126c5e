package pause

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/usererr"
)

// A Preserver preserves every sandbox a Lister returns, a bounded number at
// a time, before a deadline, and accounts for each one in a Report.
//
// A Preserver is safe for concurrent use; its configuration is fixed at New.
// Runs may follow each other (a preStop sweep, then the SIGTERM run); each
// Run has its own slots, and a Run is meant to have the node to itself.
//
// Two fixed slacks bound what a Preserve that ignores its context can cost.
// One that runs a second past its Config.SandboxTimeout is abandoned:
// reported TimedOut, with its slot given to the next sandbox (holding the
// slot would let a few broken Preserves starve every other sandbox of the
// node). And Run waits 20 ms past the hard deadline for the preserves whose
// context ended at it, so that one that returns at once is reported with
// its own error (TimedOut), and only one that outlives its context by more
// is abandoned; that is well under the time drain gives a Preserver to
// return after its hard deadline. The 20 ms run from when Run, running
// past the hard deadline, has seen the contexts end: a process frozen
// across it (a container at its CPU quota, a loaded node's scheduler)
// gives the Preserves those 20 ms once it runs again. An abandoned
// Preserve that returns before Run makes its Report (a worker held up past
// the slack on a loaded node, while Run writes its last lines) is reported
// as it returned, not abandoned: a sandbox it preserved is counted
// preserved. One that returns after is said in a line at Warn, "pause:
// sandbox abandoned returned after the Report: preserved (the Report says
// timed_out)": the Report, returned once, is as Run made it.
//
// A Preserver not made by New (the zero value, or a nil *Preserver)
// preserves nothing and says so: Run lists nothing and returns at once a
// Report whose Unknown is set and whose ListErr (and so Err) says "pause:
// Preserver not made by pause.New", logged at Error through slog.Default;
// Limit is 0, Estimator a zero Estimator nothing feeds, SizeEstimate and
// Tighten false.
type Preserver struct {
	list  Lister
	cfg   config
	tel   *telemetry
	limit atomic.Int64
	// target is Config.Limit when the limit adapts from it and it is not
	// the default start: the first Run starts at the default start and may
	// jump to it (Config.Limit); 0 once a Run's first epoch decided it (a
	// Run that decided no epoch gives it back to the next).
	target atomic.Int64
	// cold is set while the limit adapts from the default start and no
	// Run has measured a preserve: Limit reports 1 then (see Limit).
	cold atomic.Bool
	rate byteRate            // measured time per byte of a Sized sandbox's preserve
	cur  atomic.Pointer[run] // the Run in progress, for Tighten
	// spare is what the last Run left for the next to use again (see
	// runSpare); under spareMu, as Runs may overlap.
	spareMu sync.Mutex
	spare   runSpare
}

// New returns a Preserver over list, configured by cfg (its zero value is
// the default). It fails, naming what is wrong, when list is nil (or a
// typed nil: a nil pointer, func or map in the interface) or a field of cfg
// is out of range.
func New(list Lister, cfg Config) (*Preserver, error) {
	c, err := cfg.resolve()
	if isNil(list) {
		err = errors.Join(errors.New("pause: the Lister must not be nil"), err)
	}
	if err != nil {
		return nil, err
	}
	tel, err := newTelemetry(c.tp, c.mp)
	if err != nil {
		return nil, err
	}
	p := &Preserver{list: list, cfg: c, tel: tel}
	p.limit.Store(int64(c.limit))
	p.cold.Store(c.adaptive && cfg.Limit == 0)
	if start := min(defaultLimit, c.maxLimit); c.adaptive && c.limit != start && cfg.Limit > 0 {
		p.limit.Store(int64(start))
		p.target.Store(int64(c.limit))
	}
	return p, nil
}

// isNil reports whether l is nil or holds a nil pointer, func, map,
// slice, channel or interface: a typed nil whose List would fail or panic
// at SIGTERM time instead of at New.
func isNil(l Lister) bool { return usererr.IsNil(l) }

// Limit returns the concurrency a deadline.Work reserve may count on: how
// many preserves at once the Preserver runs, as far as that is known to
// pay. A fixed Config.Limit is the operator's word and is reported as it
// is. When the limit adapts, the level it has moved to (kept after the
// Run; the next Run starts from it), except before a Run has measured
// one: a climb's start is a guess, and preserves at once may share a disk
// that writes no faster than one (a plan that counted 8 at once as 8 times
// faster ended its preStop wait with one round of time for 8 pauses that
// then took 4 times as long, and preserved none). So a Preserver whose
// limit adapts from the default start (no Config.Limit) reports 1 until a
// Run has measured a preserve, though that Run starts at 8; one that adapts
// from a learned Config.Limit, a level an earlier drain measured, reports
// it while it is below the start, and the start otherwise (the level
// itself is tested by the first Run). The Estimator's estimate is then
// the time of one preserve on its own, or at the level learned, and a
// reserve of rounds at the reported limit never counts on more preserves
// at once than the node was measured to sustain. Report.Limit is the
// level a Run ran at.
func (p *Preserver) Limit() int {
	if !p.made() {
		return 0
	}
	if p.cold.Load() {
		return 1
	}
	l := p.limit.Load()
	if t := p.target.Load(); t > 0 && t < l {
		return int(t)
	}
	return int(l)
}

// Estimator returns the Estimator the Preserver feeds with every
// successful preserve's duration (Config.Estimator, or the default); never
// nil.
func (p *Preserver) Estimator() *deadline.Estimator {
	if !p.made() {
		return &deadline.Estimator{}
	}
	return p.cfg.estimator
}

// SizeEstimate returns the time a preserve of size bytes takes at the rate
// the Preserver has measured from the Sized sandboxes it preserved (kept
// across Runs), and whether it has measured one; before, a Run turns sizes
// into times from the Estimator (see Sized), and SizeEstimate returns
// false. drain's plan counts a Sized sandbox with it.
func (p *Preserver) SizeEstimate(size int64) (time.Duration, bool) {
	if !p.made() {
		return 0, false
	}
	perByte, ok := p.rate.get()
	if !ok || size <= 0 {
		return 0, false
	}
	return sizeTime(size, perByte), true
}

// Run preserves, in passes, every sandbox the Lister returns, and returns
// the Report.
//
// The deadline of ctx is the phase deadline: no preserve starts after it,
// and a pass waiting for a free slot gives up at it. hard is the budget's
// deadline, by which everything must be over; the zero time means the same
// as ctx's deadline, and a ctx without a deadline takes hard as its phase
// deadline. At the phase deadline (or when ctx is cancelled) running
// preserves are cancelled (Config.CancelAtDeadline) or, by default, left
// to finish until hard. A Preserve that ignores its context is abandoned at the
// later of the two deadlines: it is reported TimedOut and Run returns, with
// that Preserve still running in its goroutine.
//
// A pass lists the sandboxes, orders the ones no earlier pass saw (and
// the ones listed again, below), and preserves them; Run lists again
// after each pass and stops when a pass finds nothing to preserve or the
// phase deadline has passed. A failed listing is retried with the backoff
// inside the time left; one that returned sandboxes with its error has
// them preserved first, and is made again after their pass (see Lister).
// One that was paused before the Run and resumed
// during it is new to the Run, and the next pass catches it.
//
// A sandbox a later pass lists again after it was preserved (or vanished)
// runs again: a resume the server admitted after its preserve (drain's
// gate closes a server's admissions before the Run; a supervisor in front
// of a server cannot), or a listing that lags the pause. Run preserves it
// again, within the same deadlines, and its entry counts it in Relisted:
// its Outcome is that of its last preserve, so a sandbox resumed and not
// preserved again in time is counted lost, never preserved; a preserve
// again that returns ErrGone (already preserved) leaves it Preserved. One
// whose preserve failed or timed out is counted lost already and not
// preserved again. A pass that finds only sandboxes listed again is
// followed by a wait of Config.BackOff before the next listing (the waits
// grow while passes find nothing new), so that a lagging listing costs one
// preserve again per sandbox, not a tight loop; Run stops when the policy
// stops (the default's only in a Run with no deadline, 5 minutes after
// the first such pass) or its wait would end past the phase deadline. So a user resuming a sandbox in a loop cannot keep Run past
// the phase deadline, and a Run with no deadline over a Lister that lists
// preserved sandboxes still ends. The preserves again feed neither the
// Estimator, the rate of Sized sandboxes nor the adaptive limit: an
// instant one (the server had it paused) or one that writes only what
// changed since a resume says little of a preserve. The Report has one
// entry for every sandbox any pass listed.
//
// Run returns by max(ctx's deadline, hard) at the latest; with neither, it
// returns when every preserve has. Code of the user's that Run calls on
// the caller's goroutine (a Sandbox's ID, Priority, EstimatedPreserve or
// Size, the log handler, the TracerProvider) and that ends it
// (runtime.Goexit: t.FailNow in a test's Sandbox) ends the Run with it:
// no Report, the preserves running cut as at the Run's end, a line at
// Error with the stack, and no Run in progress for Tighten from then.
func (p *Preserver) Run(ctx context.Context, hard time.Time) *Report {
	if !p.made() {
		return notMadeReport(ctx, hard)
	}
	r := p.newRun(ctx, hard) // the Run in progress, for Tighten
	defer r.close()
	r.begin(ctx, hard)
	var bo backoff.BackOff // between passes that found only sandboxes listed again
	var retry error        // the last listing's, to be made again
	for pass := 1; ; pass++ {
		var found, again int
		found, again, retry = r.pass(pass, retry)
		if found+again == 0 && retry == nil || r.phaseOver() {
			break
		}
		if found > 0 {
			bo = nil
			// A listing that failed after new sandboxes is made again
			// once their pass ended, at once, unless its error asks for
			// a later time (a Retry-After, see Lister).
			if _, later := r.retryAt(retry); later && !r.relist(retry, 0) {
				break
			}
			continue
		}
		// Only sandboxes preserved before, listed again: resumed, or a
		// listing that lags the pauses; or a listing that failed again
		// after the sandboxes it lists (retried as a failed listing is).
		// Their preserves may have been instant (the server had them
		// paused), and listing again at once would make a tight loop.
		if bo == nil {
			bo = r.cfg.newBackOff(r.ctx)
		}
		if !r.relist(retry, bo.NextBackOff()) {
			break
		}
	}
	// The Report is made from here: a Tighten now would move nothing it
	// says, and must say so.
	p.cur.CompareAndSwap(r, nil)
	return r.finish()
}

// relist waits d before the next pass's listing (listWait), err the
// last listing's error (nil: it succeeded), and reports whether to make
// it. One not made because err's Retry-After ends past the phase deadline
// says so in the Report's ListErr and a log line.
func (r *run) relist(err error, d time.Duration) bool {
	again, late := r.listWait(err, d)
	if late != nil {
		r.rep.ListErr = late.Error()
		r.cfg.log.LogAttrs(r.ctx, slog.LevelWarn, "pause: not listing again: the last listing's answer asks for none before the phase deadline",
			slog.String("error", late.Error()))
	}
	return again
}

// Tighten moves the hard deadline of the Run in progress earlier, to hard:
// the preserves still running then have their contexts ended, as at the
// hard deadline Run was given, and Run returns by it; the Report's Hard
// is the new deadline. From then the Deadline of every Preserve's
// context, running or started later, is the new one (or its
// SandboxTimeout, if earlier: see Sandbox). It never moves the deadline later, and reports
// whether it moved it; with no Run in progress it does nothing, nor with
// the zero time, which says nothing of a deadline (as for
// deadline.Budget.Tighten). A Run is in progress from the moment it is
// called until it makes its Report: a Tighten that lands while Run is
// still setting up (its span, its first log line through a slow sink)
// moves the deadline its preserves start with, and one that lands as Run
// writes its last line returns false. A hard deadline moved before
// the phase deadline ends the phase there too: no preserve starts, and
// no listing is waited for, after it; it is the phase deadline the Run
// reads from then (the order of a pass, the Lister's ctx.Deadline(), the
// lines' time_left, the Report's Deadline). A hard deadline already past
// ends the preserves' contexts, and the phase, at once, and Run waits for
// them 20 ms from then, as it does after its hard deadline. To end the phase earlier than the
// hard deadline, cancel Run's context: no preserve starts after that.
// drain calls it when
// its budget moves SIGKILL earlier during the preserve phase (a read of
// the pod's deletion that lands after the phase began).
func (p *Preserver) Tighten(hard time.Time) bool {
	// The zero time is no deadline: taken for the earliest, it cut every
	// preserve at once, and as the Run's hard deadline it read as none, so
	// a Preserve ignoring its context held Run unbounded.
	if !p.made() || hard.IsZero() {
		return false
	}
	r := p.cur.Load()
	return r != nil && r.tighten(hard)
}

// notMade is the listing error of a Preserver not made by New.
const notMade = "pause: Preserver not made by pause.New"

// made reports whether p was made by New.
func (p *Preserver) made() bool { return p != nil && p.list != nil }

// notMadeReport is the Report of a Run of a Preserver not made by New:
// no listing, so the sandboxes are unknown (Err says why), logged at
// Error through slog.Default (such a Preserver has no Logger).
func notMadeReport(ctx context.Context, hard time.Time) *Report {
	slog.Default().Error(notMade + ": Run preserves nothing; the node's sandboxes are unknown")
	phase, hardline := deadlines(ctx, hard)
	now := time.Now()
	rep := &Report{Start: now, End: now, Deadline: phase, Counts: make(map[Outcome]int), ListErr: notMade, Unknown: true}
	if !hardline.Equal(phase) {
		rep.Hard = hardline
	}
	return rep
}

// deadlines returns the phase deadline and the hard deadline of a Run
// called with ctx and hard; zero times mean none.
func deadlines(ctx context.Context, hard time.Time) (phase, hardline time.Time) {
	phase, ok := ctx.Deadline()
	if !ok {
		phase = hard
	}
	hardline = phase
	if hard.After(hardline) {
		hardline = hard
	}
	return phase, hardline
}

func fmtLeft(deadline time.Time) string {
	if deadline.IsZero() {
		return "none"
	}
	return fmt.Sprint(time.Until(deadline).Round(time.Millisecond))
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.Format(time.RFC3339Nano)
}
