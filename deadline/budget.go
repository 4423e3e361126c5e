package deadline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultMargin is the largest margin a Budget keeps back from SIGKILL when
// no margin is set; see DefaultMarginFor.
const DefaultMargin = 5 * time.Second

// MinimumDefaultMargin is the smallest margin a Budget keeps back when no
// margin is set: it covers the kubelet truncating the hook's elapsed time to
// whole seconds from its own T0, a few milliseconds before the server's (the
// two can disagree on SIGKILL by up to a second), plus request latency.
const MinimumDefaultMargin = 1500 * time.Millisecond

// DefaultMarginFor returns the margin a Budget with this grace period keeps
// back from SIGKILL when no margin is set: a tenth of the grace period, at
// least MinimumDefaultMargin and at most DefaultMargin. A long grace period
// keeps 5 s for the process's exit; a short one does not give a third of
// its time away. Deadline still never lets the margin take more than half
// of the time left (see Budget.Deadline).
func DefaultMarginFor(grace time.Duration) time.Duration {
	return min(DefaultMargin, max(MinimumDefaultMargin, grace/10))
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

// Option configures a Budget.
type Option func(*Budget)

// WithLogger sets the logger to which the budget reports every change that
// takes effect (the event, T0, SIGTERM, SIGKILL and deadline), at Info
// level. The default discards everything. It must not be nil (as in
// package pause): leave the option out instead.
func WithLogger(l *slog.Logger) Option {
	return func(b *Budget) { b.log, b.logSet = l, true }
}

// WithPreStopSleep declares the pod's preStop hook to be
// lifecycle.preStop.sleep.seconds = d: the kubelet sleeps d itself, so the
// server never sees T0, and SIGTERM leaves grace - d (at least 2 s). Without
// it, a budget first anchored by SIGTERM assumes the whole grace is left and
// overestimates SIGKILL by d. It does not apply once a preStop call anchored
// the budget (an httpGet or exec hook). d must not be negative.
func WithPreStopSleep(d time.Duration) Option {
	return func(b *Budget) { b.sleep = d }
}

// WithMargin sets how long before the expected SIGKILL the budget's
// Deadline falls. The default is DefaultMarginFor(grace); zero is allowed,
// negative is an error at construction, and New rejects a margin that is
// not smaller than the grace period.
//
// Keep it above one second plus the hook's request latency: the server
// learns of the preStop hook a little after the kubelet started it, so the
// kubelet's elapsed time, truncated to whole seconds, can be one second
// more than the server's, and SIGKILL that much earlier than OnSIGTERM
// computes.
func WithMargin(d time.Duration) Option {
	return func(b *Budget) { b.margin, b.marginSet = d, true }
}

// A Budget is the time a terminating pod has: from T0, when termination
// started, to the SIGKILL the kubelet will send. Its Deadline is SIGKILL
// minus a safety margin; every phase of a shutdown ends by it.
//
// A Budget is created when the server starts, from the pod's grace period,
// and anchored later by the first termination event it is told about
// (OnPreStop or OnSIGTERM). OnSIGTERM refines the SIGKILL time with the
// kubelet's own arithmetic; Tighten (fed by kube.Pod.Tighten) moves it earlier when
// the pod's deletion shortened the grace period.
//
// Once anchored, the budget never moves T0, and it keeps these invariants:
// T0 <= Deadline <= Kill, and once SIGTERM is known, Kill >= SIGTERM +
// MinimumGracePeriod (the kubelet never kills sooner after SIGTERM).
//
// A Budget is safe for concurrent use. Create it with New or FromKillTime;
// the zero Budget has a zero grace period, so its deadline is always now.
type Budget struct {
	grace     time.Duration
	margin    time.Duration
	marginSet bool          // WithMargin was given; else the margin is DefaultMarginFor(grace)
	log       *slog.Logger  // nil: discard
	logSet    bool          // WithLogger was given (a nil one is an error)
	sleep     time.Duration // WithPreStopSleep: the manifest's preStop sleep

	mu      sync.Mutex
	anchor  Anchor
	start   time.Time // T0; zero until anchored
	kill    time.Time // expected SIGKILL; zero until anchored
	sigterm time.Time // when SIGTERM arrived; zero until then
	changed chan struct{}
}

// New returns a Budget for a pod whose termination grace period is grace
// (the kubelet's G, normally spec.terminationGracePeriodSeconds). T0 is
// fixed later by OnPreStop or OnSIGTERM.
//
// New fails if grace is not positive, if the margin or the preStop sleep is
// negative, if a margin set with WithMargin is not smaller than grace, or if
// an option or the logger is nil; the error names the field.
func New(grace time.Duration, opts ...Option) (*Budget, error) {
	if grace <= 0 {
		return nil, fmt.Errorf("deadline: grace must be positive, got %v", grace)
	}
	b, err := build(grace, opts)
	if err != nil {
		return nil, err
	}
	if b.marginSet && b.margin >= grace {
		return nil, fmt.Errorf("deadline: margin %v must be smaller than the grace period %v", b.margin, grace)
	}
	return b, nil
}

// build returns an unanchored Budget with opts applied, failing if the
// margin is negative.
func build(grace time.Duration, opts []Option) (*Budget, error) {
	b := &Budget{grace: grace, margin: DefaultMarginFor(grace)}
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("deadline: option %d is nil", i+1))
			continue
		}
		o(b)
	}
	if b.margin < 0 {
		errs = append(errs, fmt.Errorf("deadline: margin must not be negative, got %v", b.margin))
	}
	if b.logSet && b.log == nil {
		errs = append(errs, errors.New("deadline: logger must not be nil"))
	}
	if b.sleep < 0 {
		errs = append(errs, fmt.Errorf("deadline: preStop sleep must not be negative, got %v", b.sleep))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return b, nil
}

// FromKillTime returns a Budget anchored now (T0 = time.Now()) whose SIGKILL
// is at kill, as read from the pod's metadata.deletionTimestamp. Its grace is
// the time from now to kill. Unlike New, a margin that does not fit is not an
// error here (a server may learn its deletionTimestamp late): the margin then
// shrinks as Deadline describes.
//
// FromKillTime fails if kill is not in the future, the margin is negative,
// or an option or the logger is nil; the error names the field.
func FromKillTime(kill time.Time, opts ...Option) (*Budget, error) {
	now := time.Now()
	if !kill.After(now) {
		return nil, fmt.Errorf("deadline: deletionTimestamp %s is not in the future (now %s)",
			kill.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	b, err := build(kill.Sub(now), opts)
	if err != nil {
		return nil, err
	}
	b.anchor, b.start, b.kill = AnchorDeletionTimestamp, now, kill
	return b, nil
}

// OnPreStop tells the budget that the kubelet started the preStop hook at
// at. The first termination event fixes T0 = at and SIGKILL = at + grace;
// OnPreStop reports whether it was that event. Later calls, and calls after
// OnSIGTERM or Tighten anchored the budget, change nothing.
//
// Call it at the very start of the preStop handler, with time.Now().
func (b *Budget) OnPreStop(at time.Time) bool {
	b.mu.Lock()
	if b.anchor != AnchorNone {
		b.mu.Unlock()
		return false
	}
	b.anchor, b.start, b.kill = AnchorPreStop, at, at.Add(b.grace)
	b.notifyLocked()
	b.mu.Unlock()
	b.logChange("preStop")
	return true
}

// OnSIGTERM tells the budget that SIGTERM arrived at at, and refines the
// SIGKILL time exactly as the kubelet computes it:
//
//   - no preStop hook ran: T0 = at, SIGKILL = at + max(grace, 2s); with
//     WithPreStopSleep(N) (a sleep hook, which the server never sees):
//     T0 = at - N, SIGKILL = at + KubeletRemaining(grace, N);
//   - a preStop hook started at T0: the kubelet subtracts the hook's elapsed
//     time, truncated to whole seconds, from the grace period and raises what
//     is left to at least MinimumGracePeriod, so SIGKILL =
//     at + KubeletRemaining(G, at - T0). A hook that overran the grace
//     period therefore leaves exactly 2 s after SIGTERM. G here is the
//     grace period as tightened so far (SIGKILL - T0), so a Tighten during
//     the hook (kubectl delete --grace-period=N) is honoured;
//   - anchored by a deletionTimestamp: SIGKILL stays at that time, unless the
//     kubelet's 2 s floor after SIGTERM puts it later.
//
// Only the first call has an effect; OnSIGTERM reports whether it was it.
// Call it first thing in the SIGTERM handler, with time.Now().
//
// If the pod has a preStop hook the server does not see start (an exec hook
// that does not call the server), OnSIGTERM takes SIGTERM for T0 and
// overestimates SIGKILL by the hook's run time: follow it with
// kube.Pod.Tighten, whose deletionTimestamp bounds SIGKILL either way.
func (b *Budget) OnSIGTERM(at time.Time) bool {
	b.mu.Lock()
	if !b.sigterm.IsZero() {
		b.mu.Unlock()
		return false
	}
	b.sigterm = at
	switch b.anchor {
	case AnchorNone:
		// A sleep hook the server never sees started sleep before SIGTERM.
		b.anchor, b.start, b.kill = AnchorSIGTERM, at.Add(-b.sleep), at.Add(KubeletRemaining(b.grace, b.sleep))
	case AnchorPreStop:
		// b.kill - b.start is the configured grace unless Tighten cut it:
		// the kubelet then works from the shorter DeletionGracePeriodSeconds.
		b.kill = at.Add(KubeletRemaining(b.kill.Sub(b.start), at.Sub(b.start)))
	default:
		b.kill = laterOf(b.kill, at.Add(MinimumGracePeriod))
	}
	b.kill = laterOf(b.kill, b.start) // only a SIGTERM time before T0 could break this
	b.notifyLocked()
	b.mu.Unlock()
	b.logChange("SIGTERM")
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
func (b *Budget) OnHookAbandoned(at time.Time) bool {
	if !b.OnSIGTERM(at) {
		return false
	}
	b.mu.Lock()
	changed := false
	if kill := at.Add(MinimumGracePeriod); kill.Before(b.kill) {
		b.kill, changed = laterOf(kill, b.start), true
		b.notifyLocked()
	}
	b.mu.Unlock()
	if changed {
		b.logChange("preStop hook abandoned by the kubelet")
	}
	return true
}

// KubeletRemaining is the time the kubelet leaves between SIGTERM and SIGKILL
// after a preStop hook that ran for hookElapsed out of a grace period of
// grace: grace minus the elapsed time truncated to whole seconds (the
// kubelet's int64(elapsed.Seconds())), and never less than
// MinimumGracePeriod. With hookElapsed = 0 it is the wait when there was no
// hook.
func KubeletRemaining(grace, hookElapsed time.Duration) time.Duration {
	left := grace - hookElapsed.Truncate(time.Second)
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
// if kill is earlier than now + grace; otherwise it changes nothing.
func (b *Budget) Tighten(kill time.Time) bool {
	b.mu.Lock()
	changed := b.tightenLocked(kill)
	b.mu.Unlock()
	if changed {
		b.logChange("tighten")
	}
	return changed
}

func (b *Budget) tightenLocked(kill time.Time) bool {
	if b.anchor == AnchorNone {
		now := time.Now()
		if !kill.Before(now.Add(b.grace)) {
			return false
		}
		b.anchor, b.start, b.kill = AnchorDeletionTimestamp, now, laterOf(kill, now)
		b.notifyLocked()
		return true
	}
	kill = laterOf(kill, b.start)
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

// logChange reports the budget's state after event took effect.
func (b *Budget) logChange(event string) {
	if b.log == nil {
		return
	}
	st := b.State()
	attrs := []any{"event", event, "anchor", string(st.Anchor), "t0", st.Start, "kill", st.Kill,
		"deadline", st.Deadline, "grace", st.Grace, "remaining", max(time.Until(st.Deadline), 0)}
	if !st.SIGTERM.IsZero() {
		attrs = append(attrs, "sigterm", st.SIGTERM)
	}
	b.log.Info("deadline: budget changed", attrs...)
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
}

// Changed returns a channel that is closed the next time the budget's
// anchor or SIGKILL time changes (OnPreStop, OnSIGTERM or Tighten taking
// effect). Waiters that computed a deadline from the budget select on it to
// recompute; call Changed again afterwards for the next change.
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
// termination event (SIGTERM if it arrived, else T0) to SIGKILL: after an
// overrunning hook the kubelet's 2 s leave a 1 s margin, so the server still
// gets to use the other second. Deadline is never before T0 and never after
// SIGKILL.
func (b *Budget) Deadline() time.Time { return b.State().Deadline }

// Remaining returns the time left until Deadline, or zero if it has passed.
func (b *Budget) Remaining() time.Duration {
	return max(time.Until(b.Deadline()), 0)
}

// Grace returns the grace period the budget was built with (for
// FromKillTime, the time from construction to the kill time). Tighten does
// not change it; Kill - Start is the grace as tightened.
func (b *Budget) Grace() time.Duration { return b.grace }

// Margin returns the configured safety margin; State().Deadline shows the
// margin in effect.
func (b *Budget) Margin() time.Duration { return b.margin }

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
	Deadline time.Time     `json:"deadline"`         // Kill minus the margin in effect
	Grace    time.Duration `json:"grace_ns"`         // the grace period the budget was built with
	Margin   time.Duration `json:"margin_ns"`        // the configured margin
}

// State returns the budget's current view. Until the budget is anchored,
// Start is now and Kill is now + grace.
func (b *Budget) State() State {
	b.mu.Lock()
	s := State{Anchor: b.anchor, Start: b.start, SIGTERM: b.sigterm, Kill: b.kill, Grace: b.grace, Margin: b.margin}
	b.mu.Unlock()
	if s.Anchor == AnchorNone {
		s.Start = time.Now()
		s.Kill = s.Start.Add(b.grace)
	}
	last := s.Start
	if !s.SIGTERM.IsZero() {
		last = laterOf(s.SIGTERM, s.Start)
	}
	margin := min(b.margin, max(s.Kill.Sub(last)/2, 0))
	s.Deadline = s.Kill.Add(-margin)
	return s
}
