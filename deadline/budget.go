package deadline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"
)

// The default margin, when Config.Margin is zero: a tenth of the grace
// period, at least minMargin and at most maxMargin.
const (
	// maxMargin keeps 5 s for the process's exit after a long grace period.
	maxMargin = 5 * time.Second
	// minMargin covers the kubelet truncating the hook's elapsed time to
	// whole seconds from its own T0, a few milliseconds before the
	// server's (the two can disagree on SIGKILL by up to a second), plus
	// request latency.
	minMargin = 1500 * time.Millisecond
)

// defaultMargin returns the margin of a Budget with this grace period whose
// Config.Margin is zero.
// It is whole milliseconds: a grace read from two clocks (a deletion's
// wall-clock timestamp, T0 on the monotonic clock) is off by nanoseconds.
func defaultMargin(grace time.Duration) time.Duration {
	return min(maxMargin, max(minMargin, (grace/10).Round(time.Millisecond)))
}

// MinimumGracePeriod is the kubelet's minimumGracePeriodInSeconds: when a
// preStop hook leaves less than this of the grace period, the kubelet still
// waits this long between SIGTERM and SIGKILL (the "one-off 2 second
// extension").
const MinimumGracePeriod = 2 * time.Second

// Anchor says which event fixed a Budget's start (T0).
type Anchor string

// The events that can fix T0.
const (
	// AnchorNone: T0 is not fixed yet; the budget reads as if termination
	// started now.
	AnchorNone Anchor = ""
	// AnchorPreStop: the kubelet started the preStop hook.
	AnchorPreStop Anchor = "preStop"
	// AnchorSIGTERM: SIGTERM arrived and no preStop hook had run.
	AnchorSIGTERM Anchor = "SIGTERM"
	// AnchorDeletionTimestamp: the pod's metadata.deletionTimestamp gave the
	// SIGKILL time directly (FromKillTime, or Tighten before any other
	// event).
	AnchorDeletionTimestamp Anchor = "deletionTimestamp"
)

// Config configures a Budget. Its zero value is the default: a margin
// scaled to the grace period, no preStop sleep, no logging.
type Config struct {
	// Margin is how long before the expected SIGKILL the budget's Deadline
	// falls: the time kept for the process to exit. Zero means a tenth of
	// the grace period in use (Budget.GraceInUse: a deletion's shorter
	// grace once Tighten knows it), at least 1.5 s and at most 5 s: a long
	// grace period keeps 5 s for the exit, a short one does not give a
	// third of its time away. Whatever it is, Deadline never lets the margin take
	// more than half of the time left (see Budget.Deadline). It must be
	// >= 0 and, in New, smaller than the grace period.
	//
	// Keep it above one second plus the hook's request latency: the server
	// learns of the preStop hook a little after the kubelet started it, so
	// the kubelet's elapsed time, truncated to whole seconds, can be one
	// second more than the server's, and SIGKILL that much earlier than
	// OnSIGTERM computes.
	Margin time.Duration

	// PreStopSleep declares the pod's preStop hook to be
	// lifecycle.preStop.sleep.seconds = PreStopSleep: the kubelet sleeps
	// that long itself, so the server never sees T0, and SIGTERM leaves
	// grace - PreStopSleep (at least 2 s). Zero, the default, means no
	// sleep hook: a budget first anchored by SIGTERM then assumes the whole
	// grace is left. It does not apply once a preStop call anchored the
	// budget (an httpGet or exec hook). It must be >= 0 and, in New, not
	// longer than the grace period: the API server admits no sleep longer
	// than terminationGracePeriodSeconds, so a longer one is not the pod's
	// (the kubelet would wait for it only the grace period, send SIGTERM
	// then and SIGKILL 2 s later, and T0 would not be SIGTERM - sleep).
	// The sleep is the kubelet's time, not the server's: Plan.Shortfall
	// counts the reserves from SIGTERM, what the sleep leaves.
	PreStopSleep time.Duration

	// Logger receives every change of the budget that takes effect (the
	// event, its number, T0, SIGTERM, SIGKILL and deadline, and once the
	// kubelet ran the termination over (OnRestart) that run's start and
	// grace, as that change left them), at Info level; nil discards them.
	Logger *slog.Logger
}

// A Budget is the time a terminating pod has: from T0, when termination
// started, to the SIGKILL the kubelet will send. Its Deadline is SIGKILL
// minus a safety margin; every phase of a shutdown ends by it.
//
// A Budget is created when the server starts, from the pod's grace period,
// and anchored later by the first termination event it is told about
// (OnPreStop or OnSIGTERM). OnSIGTERM refines the SIGKILL time with the
// kubelet's own arithmetic; Tighten (fed by kube.Pod.Tighten) moves it earlier when
// the pod's deletion shortened the grace period; OnRestart follows the
// kubelet when it runs the termination over (the hook runs again), and
// when the deletion that began it gave a grace longer than the budget's.
//
// Once anchored, the budget never moves T0, and it keeps these invariants:
// T0 <= Deadline <= Kill, and once SIGTERM is known, Kill >= SIGTERM +
// MinimumGracePeriod (the kubelet never kills sooner after SIGTERM).
//
// A Budget is safe for concurrent use. Create it with New or FromKillTime;
// the zero Budget has a zero grace period, so its deadline is always now.
type Budget struct {
	grace  time.Duration
	margin time.Duration // Config.Margin; zero: defaultMargin(GraceInUse)
	log    *slog.Logger  // nil: discard
	sleep  time.Duration // Config.PreStopSleep: the manifest's preStop sleep

	mu      sync.Mutex
	anchor  Anchor
	start   time.Time     // T0; zero until anchored
	kill    time.Time     // expected SIGKILL; zero until anchored
	sigterm time.Time     // when SIGTERM arrived; zero until then
	restart time.Time     // OnRestart: when the kubelet last ran the termination over; zero if never
	regrace time.Duration // OnRestart: the grace of that run
	// end is when the node goes down under the kubelet's own termination
	// (internal/nodeend); zero if not known. Unlike kill it has no floor
	// after SIGTERM: the node does not wait for the kubelet's 2 s.
	end time.Time
	// first is the first run's grace when a deletion gave it more than
	// grace (OnRestart at or before T0); zero: grace. A run over is given
	// at most it.
	first time.Duration
	// abandoned: OnHookAbandoned took effect, the kubelet's grace ran out
	// at SIGTERM, so no longer grace is the first run's.
	abandoned bool
	changed   chan struct{}
	changes   uint64 // how many changes took effect: the latest one's number
}

// New returns a Budget for a pod whose termination grace period is grace
// (the kubelet's G, normally spec.terminationGracePeriodSeconds), configured
// by c (its zero value is the default). T0 is fixed later by OnPreStop or
// OnSIGTERM.
//
// New fails if grace is not positive, or if a field of c is negative,
// c.Margin is not smaller than grace or c.PreStopSleep is longer than
// grace; the error names the field.
func New(grace time.Duration, c Config) (*Budget, error) {
	var errs []error
	if grace <= 0 {
		errs = append(errs, fmt.Errorf("deadline: grace must be positive, got %v", grace))
	} else {
		if c.Margin >= grace {
			errs = append(errs, fmt.Errorf("deadline: Config.Margin (%v) must be smaller than the grace period %v", c.Margin, grace))
		}
		// A sleep hook longer than the grace is no pod's: the API server
		// refuses it. Taken as given, OnSIGTERM put T0 the sleep before
		// SIGTERM, where the kubelet, which waits for a hook at most the
		// grace period, started it the grace period before.
		if c.PreStopSleep > grace {
			errs = append(errs, fmt.Errorf("deadline: Config.PreStopSleep (%v) must not be longer than the grace period %v: "+
				"the API server admits no preStop sleep longer than terminationGracePeriodSeconds, and the kubelet "+
				"waits for a preStop hook at most the grace period, then sends SIGTERM and SIGKILL %v later",
				c.PreStopSleep, grace, MinimumGracePeriod))
		}
	}
	b, err := build(grace, c)
	if err = errors.Join(append(errs, err)...); err != nil {
		return nil, err
	}
	return b, nil
}

// build returns an unanchored Budget configured by c, failing if a field
// is negative.
func build(grace time.Duration, c Config) (*Budget, error) {
	var errs []error
	if c.Margin < 0 {
		errs = append(errs, fmt.Errorf("deadline: Config.Margin must be >= 0, got %v", c.Margin))
	}
	if c.PreStopSleep < 0 {
		errs = append(errs, fmt.Errorf("deadline: Config.PreStopSleep must be >= 0, got %v", c.PreStopSleep))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Budget{grace: grace, margin: c.Margin, log: c.Logger, sleep: c.PreStopSleep}, nil
}

// FromKillTime returns a Budget anchored now (T0 = time.Now()) whose SIGKILL
// is at kill, as read from the pod's metadata.deletionTimestamp. Its grace is
// the time from now to kill. Unlike New, a margin that does not fit is not an
// error here (a server may learn its deletionTimestamp late): the margin then
// shrinks as Deadline describes.
//
// FromKillTime fails if kill is not in the future or a field of c is
// negative; the error names the field.
func FromKillTime(kill time.Time, c Config) (*Budget, error) {
	now := time.Now()
	kill = monotonicAt(kill, now)
	if !kill.After(now) {
		return nil, fmt.Errorf("deadline: deletionTimestamp %s is not in the future (now %s)",
			kill.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	b, err := build(kill.Sub(now), c)
	if err != nil {
		return nil, err
	}
	b.anchor, b.start, b.kill = AnchorDeletionTimestamp, now, kill
	return b, nil
}

// OnPreStop tells the budget that the kubelet started the preStop hook at
// at. The first termination event fixes T0 = at and SIGKILL = at + grace;
// OnPreStop reports whether it was that event. Later calls, and calls after
// OnSIGTERM or Tighten anchored the budget, change nothing. A zero at is
// now (time.Now(), the monotonic clock's reading included), not year 1,
// which would have put SIGKILL long past.
//
// Call it at the very start of the preStop handler, with time.Now().
func (b *Budget) OnPreStop(at time.Time) bool {
	at = monotonic(nowIfZero(at))
	b.mu.Lock()
	if b.anchor != AnchorNone {
		b.mu.Unlock()
		return false
	}
	b.anchor, b.start, b.kill = AnchorPreStop, at, at.Add(b.grace)
	b.notifyLocked()
	line := b.lineLocked(true)
	b.mu.Unlock()
	line.write("preStop")
	return true
}

// OnSIGTERM tells the budget that SIGTERM arrived at at, and refines the
// SIGKILL time exactly as the kubelet computes it:
//
//   - no preStop hook ran: T0 = at, SIGKILL = at + max(grace, 2s); with
//     Config.PreStopSleep N (a sleep hook, which the server never sees):
//     T0 = at - N, SIGKILL = at + KubeletRemaining(grace, N);
//   - a preStop hook started at T0: the kubelet subtracts the hook's elapsed
//     time, truncated to whole seconds, from the grace period and raises what
//     is left to at least MinimumGracePeriod, so SIGKILL =
//     at + KubeletRemaining(G, at - T0). A hook that overran the grace
//     period therefore leaves exactly 2 s after SIGTERM. A SIGTERM time
//     read before T0 (a preStop call taken up after the kubelet gave up on
//     it) counts as a hook that ran no time: SIGKILL = at + max(G, 2s),
//     the latest the kubelet kills, since it starts the hook before
//     SIGTERM;
//   - anchored by a deletionTimestamp, or a preStop hook's SIGKILL cut by
//     Tighten (kubectl delete --grace-period=N, read at the hook's call;
//     a second, shorter deletion while the hook runs changes nothing of
//     the kubelet's: it keeps its first grace, see OnRestart): SIGKILL
//     stays at that time, unless the kubelet's 2 s floor after SIGTERM puts
//     it later. The kubelet's arithmetic then runs on its own T0 and the
//     deletion's whole-second grace, which the server does not see; the
//     SIGKILL it computes is never before the deletionTimestamp (deletion +
//     grace), so the budget keeps that time whether the pod's read landed
//     before SIGTERM or after it (Tighten after SIGTERM gives the same).
//
// Only the first call has an effect; OnSIGTERM reports whether it was it.
// Call it first thing in the SIGTERM handler, with time.Now(). A zero at is
// now (time.Now(), the monotonic clock's reading included), not year 1.
//
// If the pod has a preStop hook the server does not see start (an exec hook
// that does not call the server), OnSIGTERM takes SIGTERM for T0 and
// overestimates SIGKILL by the hook's run time: follow it with
// kube.Pod.Tighten, whose deletionTimestamp bounds SIGKILL either way.
func (b *Budget) OnSIGTERM(at time.Time) bool {
	b.mu.Lock()
	first := b.sigtermLocked(monotonic(nowIfZero(at)))
	line := b.lineLocked(first)
	b.mu.Unlock()
	line.write("SIGTERM")
	return first
}

// sigtermLocked is OnSIGTERM's change, at on the monotonic clock; the
// caller holds b.mu, and logs.
func (b *Budget) sigtermLocked(at time.Time) bool {
	if !b.sigterm.IsZero() {
		return false
	}
	b.sigterm = at
	switch {
	case b.anchor == AnchorNone:
		// A sleep hook the server never sees started sleep before SIGTERM.
		b.anchor, b.start, b.kill = AnchorSIGTERM, at.Add(-b.sleep), at.Add(KubeletRemaining(b.grace, b.sleep))
	case b.anchor == AnchorPreStop && b.kill.Equal(b.start.Add(b.grace)) && b.restart.IsZero(): // Tighten did not cut it
		// A SIGTERM read before T0 (the preStop call taken up late, read
		// in another goroutine) is a hook that ran no time: the kubelet
		// starts the hook before it sends SIGTERM. Taken as a negative
		// run, its whole seconds were added to the grace.
		b.kill = at.Add(KubeletRemaining(b.grace, max(at.Sub(b.start), 0)))
	case !b.restart.IsZero() && b.kill.Equal(b.restart.Add(b.regrace)) && at.After(b.restart): // the kubelet's new run
		b.kill = at.Add(KubeletRemaining(b.regrace, at.Sub(b.restart)))
	default:
		// A time the budget was given (a deletionTimestamp). Subtracting
		// the hook's whole seconds from SIGKILL - T0 instead would add the
		// fraction of a second the server's hook time has past them: up to
		// 1 s after the deletionTimestamp, and only when its read landed
		// before SIGTERM.
		b.kill = laterOf(b.kill, at.Add(MinimumGracePeriod))
	}
	b.kill = laterOf(b.kill, b.start) // only a SIGTERM time before T0 could break this
	b.notifyLocked()
	return true
}

// OnHookAbandoned tells the budget that SIGTERM arrived at at while the
// preStop hook was still running: the kubelet stopped waiting for it. It
// does that only once the grace period it uses has run out since the
// hook's start, so whatever that grace was (the manifest's, a shorter
// deletion's, a node-shutdown slice, an eviction's), the hook overran it and
// SIGKILL comes exactly MinimumGracePeriod after SIGTERM. The budget takes
// that: it does what OnSIGTERM does, then moves SIGKILL to at + 2 s if that
// is earlier. This is the one case where a server learns a grace period the
// kubelet shortened without the API server (graceful node shutdown and
// node-pressure eviction set no deletionTimestamp).
//
// Like OnSIGTERM, only the first of the two calls has an effect; it reports
// whether it was it. The caller (drain.Drainer.Shutdown) decides the hook was
// running: a preStop request still open when SIGTERM arrives.
//
// Both moves are one change: no reader (Changed, Deadline, a Plan's
// windows, the Logger's line) sees the SIGKILL between them. A zero at is
// now (time.Now(), the monotonic clock's reading included), not year 1.
func (b *Budget) OnHookAbandoned(at time.Time) bool {
	at = monotonic(nowIfZero(at))
	b.mu.Lock()
	first := b.sigtermLocked(at)
	if kill := at.Add(MinimumGracePeriod); first && kill.Before(b.kill) {
		b.kill = laterOf(kill, b.start)
	}
	b.abandoned = b.abandoned || first
	line := b.lineLocked(first)
	b.mu.Unlock()
	line.write("SIGTERM with the preStop hook abandoned by the kubelet")
	return first
}

// OnRestart tells the budget that the kubelet ran the pod's termination
// over from at, with grace: it started the preStop hook again at at (a
// server sees a new hook call). A restarted kubelet does that, with the
// grace it reads from the pod; so would a kubelet that honoured a second,
// shorter deletion (the kubelet v1.34 does not: its termination keeps the
// grace it started with, and no hook runs again; measured, see
// docs/budget.md). Pass the deletion's deletionGracePeriodSeconds
// (kube.Deletion.Grace); one longer than the first run's grace (Grace, or
// a deletion's longer one, below) counts as that: the API server lets a
// second deletion only shorten the first's, and a restarted kubelet reads
// no more than it.
//
// SIGKILL becomes the new run's: at + grace, or, when SIGTERM arrived after
// at, SIGTERM + KubeletRemaining(grace, SIGTERM - at). That can be later
// than the SIGKILL the budget had (a new run of a whole grace, or a
// deletionTimestamp that a second deletion set to the FIRST deletion's
// time plus its grace, which is not when the kubelet kills). T0 stays; SIGKILL is
// never before T0, nor, once SIGTERM is known, before SIGTERM + 2 s.
//
// A call for a run older than the latest (at before it) changes nothing,
// nor does one for the same run with a grace no shorter (the kubelet's
// grace only decreases). On an unanchored budget OnRestart anchors it at
// at, as OnPreStop does. It reports whether SIGKILL or the run changed, and
// ignores a grace that is not positive. A zero at is now (time.Now(), the
// monotonic clock's reading included): a run starting now, not one in
// year 1, older than any.
//
// The first run's longer grace. Before any run over, a call with at at or
// before T0 and a grace longer than Grace is no new run: it is the
// deletion that began the termination, made at at (its deletionTimestamp
// less its deletionGracePeriodSeconds), asking for more than the
// manifest's. The kubelet gives it in full (v1.34.4: calculateEffectiveGracePeriod
// takes deletionGracePeriodSeconds for a pod that is not terminating yet,
// whatever the spec says, and the API server does not cap it), so SIGKILL
// moves later to at + grace, the deletionTimestamp: never after the
// kubelet's, which it times from its own T0, after the deletion. SIGKILL
// keeps its floors (T0, SIGTERM + 2 s), and OnSIGTERM keeps that time as
// it keeps a deletionTimestamp. Such a call never moves SIGKILL earlier
// (Tighten does), and changes nothing once OnHookAbandoned took effect:
// SIGTERM with the hook open is the kubelet's grace run out. Pass it only
// the pod's own first deletion, and only when it began the termination: a
// termination the kubelet began on its own (graceful node shutdown, an
// eviction) keeps that grace, which a later deletion can only shorten.
// GraceInUse and the default margin stay Grace's.
func (b *Budget) OnRestart(at time.Time, grace time.Duration) bool {
	if grace <= 0 {
		return false
	}
	at = nowIfZero(at)
	b.mu.Lock()
	if b.anchor != AnchorNone && b.restart.IsZero() && grace > b.grace {
		if first := asKnown(at, b.start); !first.After(b.start) {
			changed := b.longerLocked(first, grace)
			line := b.lineLocked(changed)
			b.mu.Unlock()
			line.write("the deletion's grace, longer than the budget's")
			return changed
		}
	}
	firstGrace := max(b.grace, b.first)
	grace = min(grace, firstGrace)
	run, runGrace := b.start, firstGrace
	if !b.restart.IsZero() {
		run, runGrace = b.restart, b.regrace
	}
	// The same run given again (an exec hook's start, read as text at
	// every read of the pod) is that run: a few nanoseconds later would
	// be a new one.
	at = asKnown(at, run)
	if b.anchor != AnchorNone && (at.Before(run) || at.Equal(run) && grace >= runGrace) {
		b.mu.Unlock()
		return false
	}
	if b.anchor == AnchorNone {
		b.anchor, b.start = AnchorPreStop, at
	}
	b.restart, b.regrace = at, grace
	kill := at.Add(grace)
	if b.sigterm.After(at) {
		kill = b.sigterm.Add(KubeletRemaining(grace, b.sigterm.Sub(at)))
	}
	if !b.sigterm.IsZero() {
		kill = laterOf(kill, b.sigterm.Add(MinimumGracePeriod))
	}
	b.kill = laterOf(kill, b.start)
	b.notifyLocked()
	line := b.lineLocked(true)
	b.mu.Unlock()
	line.write("restart")
	return true
}

// longerLocked is OnRestart for the first run's longer grace: the
// deletion made at at gave grace, longer than b.grace. It moves SIGKILL
// only later, and reports whether it did. The caller holds b.mu, and logs.
func (b *Budget) longerLocked(at time.Time, grace time.Duration) bool {
	if b.abandoned {
		return false
	}
	kill := laterOf(at.Add(grace), b.start)
	if !b.sigterm.IsZero() {
		kill = laterOf(kill, b.sigterm.Add(MinimumGracePeriod))
	}
	if !kill.After(b.kill) {
		return false
	}
	b.kill, b.first = kill, max(b.first, grace)
	b.notifyLocked()
	return true
}

// KubeletRemaining is the time the kubelet leaves between SIGTERM and SIGKILL
// after a preStop hook that ran for hookElapsed out of a grace period of
// grace: grace minus the elapsed time truncated to whole seconds (the
// kubelet's int64(elapsed.Seconds())), and never less than
// MinimumGracePeriod. With hookElapsed = 0 it is the wait when there was no
// hook. The difference saturates at the largest Duration instead of
// wrapping round (the largest grace and a negative hookElapsed).
func KubeletRemaining(grace, hookElapsed time.Duration) time.Duration {
	whole := hookElapsed.Truncate(time.Second)
	left := grace - whole
	switch {
	case whole < 0 && left < grace:
		left = math.MaxInt64
	case whole > 0 && left > grace:
		left = math.MinInt64
	}
	return max(left, MinimumGracePeriod)
}

// Tighten moves the expected SIGKILL earlier to kill, for example when the
// pod's deletionTimestamp shows that `kubectl delete --grace-period=N`
// shortened the grace period. It never moves SIGKILL later, and reports
// whether it changed anything.
//
// Two floors keep the budget consistent: SIGKILL never moves before T0,
// and once SIGTERM is known never before SIGTERM + MinimumGracePeriod (the
// kubelet always waits that long after SIGTERM, so a deletionTimestamp read
// after an overrunning hook does not erase the 2 s extension).
//
// On an unanchored budget, Tighten anchors T0 at now (AnchorDeletionTimestamp)
// if kill is earlier than now + grace; otherwise it changes nothing. The
// zero time says nothing of SIGKILL, and changes nothing.
func (b *Budget) Tighten(kill time.Time) bool {
	if kill.IsZero() {
		return false
	}
	b.mu.Lock()
	changed := b.tightenLocked(kill)
	line := b.lineLocked(changed)
	b.mu.Unlock()
	line.write("tighten")
	return changed
}

func (b *Budget) tightenLocked(kill time.Time) bool {
	if b.anchor == AnchorNone {
		now := time.Now()
		kill = monotonicAt(kill, now)
		if !kill.Before(now.Add(b.grace)) {
			return false
		}
		b.anchor, b.start, b.kill = AnchorDeletionTimestamp, now, laterOf(kill, now)
		b.notifyLocked()
		return true
	}
	// The same deletionTimestamp read again is no change (asKnown). Any
	// other time is compared on the monotonic clock: the budget's times
	// keep the wall clock reading of when they were taken, so compared by
	// the wall clock after a step of it, a later time could pass for an
	// earlier one, or one below a floor for one above it.
	kill = laterOf(asKnown(kill, b.kill), b.start)
	if !b.sigterm.IsZero() {
		kill = laterOf(kill, b.sigterm.Add(MinimumGracePeriod))
	}
	if !kill.Before(b.kill) {
		return false
	}
	b.kill = kill
	b.notifyLocked()
	return true
}

// A logLine is a change's line for Config.Logger: the state the change
// left and its number, both read under the lock the change was made
// under. Read after the lock was released, a change made meanwhile by
// another goroutine (SIGTERM in its handler, a Tighten from a read of
// the pod) showed in this change's line, and two lines showed one state.
type logLine struct {
	log    *slog.Logger
	st     State
	change uint64
	first  time.Duration // the first run's longer grace, a deletion's (OnRestart); zero if none
}

// lineLocked returns the line of the change just made, or nil when took is
// false (nothing changed) or there is no Logger. The caller holds b.mu.
func (b *Budget) lineLocked(took bool) *logLine {
	if !took || b.log == nil {
		return nil
	}
	return &logLine{log: b.log, st: b.stateLocked(), change: b.changes, first: b.first}
}

// write logs the line for event, outside the budget's lock: a slow
// handler holds no reader of the budget. Lines of concurrent changes may
// be written in either order; their change numbers give the order the
// changes took effect. A nil line writes nothing.
func (l *logLine) write(event string) {
	if l == nil {
		return
	}
	st := l.st
	attrs := []any{"event", event, "change", l.change, "anchor", string(st.Anchor), "t0", st.Start, "kill", st.Kill,
		"deadline", st.Deadline, "grace", st.Grace, "remaining", max(time.Until(st.Deadline), 0)}
	if !st.SIGTERM.IsZero() {
		attrs = append(attrs, "sigterm", st.SIGTERM)
	}
	// What SIGKILL follows after OnRestart, the one change that can move
	// it later: the run over and its grace, or the deletion's grace longer
	// than the budget's that the first run has. Without them, a line
	// showed the new SIGKILL beside the manifest's grace and nothing it
	// was computed from.
	if !st.Restart.IsZero() {
		attrs = append(attrs, "restart", st.Restart, "restart_grace", st.RestartGrace)
	}
	if l.first > 0 {
		attrs = append(attrs, "deletion_grace", l.first)
	}
	l.log.Info("deadline: budget changed", attrs...)
}

// asKnown returns known when t is it as given (Equal), else t on the
// monotonic clock: the same time read again as text (a deletionTimestamp,
// an exec hook's start) taken onto the monotonic clock would come out a
// few nanoseconds off each time (the two readings of time.Now are that
// far apart), and after a step of the node's clock, off by the step.
func asKnown(t, known time.Time) time.Time {
	if t.Equal(known) {
		return known
	}
	return monotonic(t)
}

// nowIfZero returns time.Now() for the zero time, else t. The zero value is
// the safe path: a caller that passes an event's time it did not set means
// the event is now, and taken as year 1 it would leave no time at all.
// (Tighten differs: a zero SIGKILL says nothing, so it changes nothing.)
func nowIfZero(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// monotonic returns t on the monotonic clock: t itself when it carries a
// monotonic reading (time.Now's), else the instant its wall clock reading
// names as of now. A time read as text (an exec hook's ?start=, a pod's
// deletionTimestamp) has only a wall clock reading, and Go compares such a
// time with time.Now by the wall clock, so a step of the node's clock (NTP,
// a VM resumed) would move it; the kubelet times the grace on its monotonic
// clock, which no step moves. A time more than 292 years away stays as it
// is.
func monotonic(t time.Time) time.Time { return monotonicAt(t, time.Now()) }

// monotonicAt is monotonic with now read by the caller.
func monotonicAt(t, now time.Time) time.Time {
	if t != t.Round(0) { // Round(0) strips a monotonic reading: t has one
		return t
	}
	d := t.Sub(now)
	if d == math.MaxInt64 || d == math.MinInt64 { // saturated
		return t
	}
	return now.Add(d)
}

func laterOf(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

func (b *Budget) notifyLocked() {
	if b.changed != nil {
		close(b.changed)
	}
	b.changed = make(chan struct{})
	b.changes++
}

// Changed returns a channel that is closed the next time the budget's
// anchor or SIGKILL time changes (OnPreStop, OnSIGTERM, OnHookAbandoned,
// OnRestart or Tighten taking effect). Waiters that computed a deadline
// from the budget select on it to recompute; call Changed again
// afterwards for the next change. Call it before reading the budget, not
// after: a change between the read and the call would close a channel
// the waiter never held, and it would wait on the next change's.
func (b *Budget) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return b.changed
}

// Anchored reports whether T0 has been fixed.
func (b *Budget) Anchored() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.anchor != AnchorNone
}

// Start returns T0. Until the budget is anchored it returns the current time.
func (b *Budget) Start() time.Time { return b.State().Start }

// Kill returns the expected SIGKILL time. Until the budget is anchored it
// reads as if termination started now.
func (b *Budget) Kill() time.Time { return b.State().Kill }

// Deadline returns the time by which all work must be done: SIGKILL minus the
// margin. The margin never takes more than half of the time from the latest
// termination event (T0, the hook's run again (OnRestart) or SIGTERM,
// whichever came last) to SIGKILL: after an overrunning hook the kubelet's
// 2 s leave a 1 s margin, so the server still gets to use the other second.
// Under the kubelet's own termination the node may go down before SIGKILL
// (drain.Config.KubeletGrace: graceful node shutdown ends the node at its
// slice's end, SIGTERM + 2 s or not); the drain tells the budget that end,
// and Deadline is then that end minus the margin, by the same rule.
// Deadline is never before T0 and never after SIGKILL.
func (b *Budget) Deadline() time.Time { return b.State().Deadline }

// Remaining returns the time left until Deadline, or zero if it has passed.
func (b *Budget) Remaining() time.Duration {
	return max(time.Until(b.Deadline()), 0)
}

// Grace returns the grace period the budget was built with (for
// FromKillTime, the time from construction to the kill time). Tighten does
// not change it; Kill - Start is the grace as tightened.
func (b *Budget) Grace() time.Duration { return b.grace }

// GraceInUse returns the grace period the kubelet uses, as the budget knows
// it: Grace, or Kill - Start once a deletion's shorter grace (Tighten) or
// the kubelet's own put SIGKILL earlier, or after OnRestart the new run's
// grace; never more than Grace, never negative (a deletion's longer grace,
// OnRestart, moves SIGKILL, not the shares). A step's reserve that follows
// the grace is a share of it, and so is the default margin.
func (b *Budget) GraceInUse() time.Duration { return b.State().graceInUse() }

func (s State) graceInUse() time.Duration {
	if !s.Restart.IsZero() { // the kubelet's latest run: its own grace
		return min(s.Grace, s.RestartGrace, max(s.Kill.Sub(s.Restart), 0))
	}
	return min(s.Grace, max(s.Kill.Sub(s.Start), 0))
}

// Margin returns the safety margin: Config.Margin, or by default the
// margin of the grace in use, which a deletion's shorter grace makes
// smaller. State().Deadline shows the margin in effect.
func (b *Budget) Margin() time.Duration { return b.State().Margin }

// Context returns a context derived from parent whose deadline is the
// budget's Deadline at the time of the call. A later change of the budget
// (see Changed) does not move the context's deadline.
func (b *Budget) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithDeadline(parent, b.Deadline())
}

// State is a point-in-time view of a Budget, ready for logs and reports.
type State struct {
	Anchor   Anchor        `json:"anchor"`           // which event fixed T0
	Start    time.Time     `json:"start"`            // T0
	SIGTERM  time.Time     `json:"sigterm,omitzero"` // when SIGTERM arrived; zero before
	Kill     time.Time     `json:"kill"`             // expected SIGKILL
	Deadline time.Time     `json:"deadline"`         // Kill minus the margin in effect; the node's end minus it, when that comes first (drain.Config.KubeletGrace)
	Grace    time.Duration `json:"grace_ns"`         // the grace period the budget was built with
	// Restart is when the kubelet last ran the termination over (OnRestart:
	// the hook ran again); zero if it did not.
	Restart      time.Time     `json:"restart,omitzero"`
	RestartGrace time.Duration `json:"restart_grace_ns,omitempty"` // the grace of that run
	Margin       time.Duration `json:"margin_ns"`                  // Budget.Margin: Config.Margin or the default for the grace in use
	end          time.Time     // when the node goes down (internal/nodeend); zero if not known
	sleep        time.Duration // Config.PreStopSleep: the kubelet's sleep before SIGTERM
}

// State returns the budget's current view. Until the budget is anchored,
// Start is now and Kill is now + grace.
func (b *Budget) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stateLocked()
}

// stateLocked is State; the caller holds b.mu.
func (b *Budget) stateLocked() State { return b.rawLocked().settled() }

// raw returns the budget's state unsettled: its Margin as configured (zero
// for the default, which follows the grace in use) and no Deadline. A Plan
// asks it what SIGTERM at a later time would make of the budget
// (ifSIGTERM), all from one reading.
func (b *Budget) raw() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rawLocked()
}

// rawLocked is raw; the caller holds b.mu.
func (b *Budget) rawLocked() State {
	s := State{Anchor: b.anchor, Start: b.start, SIGTERM: b.sigterm, Kill: b.kill, Grace: b.grace, Margin: b.margin,
		Restart: b.restart, RestartGrace: b.regrace, end: b.end, sleep: b.sleep}
	if s.Anchor == AnchorNone {
		s.Start = time.Now()
		s.Kill = s.Start.Add(b.grace)
	}
	return s
}

// settled returns the raw state s with its margin (the default, when
// Margin is zero) and its Deadline.
func (s State) settled() State {
	last := laterOf(s.Start, s.Restart)
	if !s.SIGTERM.IsZero() {
		last = laterOf(s.SIGTERM, last)
	}
	if s.Margin == 0 {
		s.Margin = defaultMargin(s.graceInUse())
	}
	margin := min(s.Margin, max(s.Kill.Sub(last)/2, 0))
	s.Deadline = s.Kill.Add(-margin)
	if !s.end.IsZero() && s.end.Before(s.Kill) { // the node goes down first: the margin is kept before its end
		s.Deadline = s.end.Add(-min(s.Margin, max(s.end.Sub(last)/2, 0)))
	}
	return s
}

// endAt records that the node goes down at end (internal/nodeend), an
// earlier end than one recorded before, on an anchored budget; it reports
// whether the deadline moved.
func (b *Budget) endAt(end time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.anchor == AnchorNone || end.IsZero() || !b.end.IsZero() && !end.Before(b.end) {
		return false
	}
	was := b.stateLocked().Deadline
	b.end = laterOf(monotonic(end), b.start)
	if b.stateLocked().Deadline.Equal(was) {
		return false
	}
	b.notifyLocked()
	return true
}

// slept returns the raw state s settled as the sleep hook of
// Config.PreStopSleep leaves it at SIGTERM, where the server's work
// starts, and whether such a hook runs: with no preStop call anchoring
// the budget (OnSIGTERM's arithmetic: SIGTERM at T0 + sleep, SIGKILL
// KubeletRemaining(grace, sleep) after it), or once SIGTERM anchored it.
// The sleep is the kubelet's time, none of the server's.
func (s State) slept() (State, bool) {
	switch {
	case s.sleep <= 0:
		return s, false
	case s.Anchor == AnchorNone:
		s.Anchor, s.SIGTERM = AnchorSIGTERM, s.Start.Add(s.sleep)
		s.Kill = s.SIGTERM.Add(KubeletRemaining(s.Grace, s.sleep))
	case s.Anchor != AnchorSIGTERM:
		return s, false
	}
	return s.settled(), true
}

// ifSIGTERM returns the raw state s, before SIGTERM (unanchored: as if
// termination started when s was read), settled as SIGTERM at at (not
// before T0) leaves it at the least: the kubelet sends SIGKILL no sooner
// than s.Kill (OnSIGTERM's arithmetic, from T0 or the run over, only adds
// the fraction of a second the kubelet's truncation drops; a
// deletionTimestamp stays) and no sooner than MinimumGracePeriod after
// SIGTERM (killContainer raises what the hook left to it, and the budget
// keeps that floor whatever it learns after). A hook abandoned early
// (OnHookAbandoned: a grace the budget did not know) is no SIGTERM a plan
// can lay out for.
func (s State) ifSIGTERM(at time.Time) State {
	s.SIGTERM = at
	s.Kill = laterOf(s.Kill, at.Add(MinimumGracePeriod))
	return s.settled()
}
