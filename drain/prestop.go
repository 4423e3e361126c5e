package drain

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/bounded"
	"github.com/drainkit/drainkit/internal/usererr"
	"github.com/drainkit/drainkit/pause"
)

// Reasons a preStop wait ended, in PreStopSummary.Reason.
const (
	reasonWaiting  = "waiting"  // still waiting (a ?wait= bound or the client gave up first)
	reasonDrained  = "drained"  // no running sandboxes left
	reasonDeadline = "deadline" // the drain phase's deadline came
	reasonSIGTERM  = "sigterm"  // Shutdown started
	reasonForced   = "forced"   // Force was called
)

// A PreStopSummary is what the preStop handler answers, as JSON.
type PreStopSummary struct {
	Start time.Time `json:"start"`        // T0: the first preStop call
	End   time.Time `json:"end,omitzero"` // when the wait ended
	Done  bool      `json:"done"`         // the wait is over
	// Reason is why the wait ended, an identifier: "waiting" (not over:
	// a ?wait= bound or the client gave up first), "drained" (no running
	// sandboxes left), "deadline" (the drain phase's deadline came),
	// "sigterm" (Shutdown started) or "forced" (Force was called).
	Reason  string `json:"reason"`
	Running int    `json:"running"` // running sandboxes at the last count (0 before the first)
	// DrainDeadline is the drain phase's deadline at the last count
	// (before the first, at T0), and Kill the expected SIGKILL, each named
	// by the wall clock as it reads when the answer is made, which a
	// client on the node compares with its own: see onTheClockNow.
	DrainDeadline time.Time     `json:"drain_deadline"`
	Kill          time.Time     `json:"kill"`
	Waited        time.Duration `json:"waited_ns"` // how long the wait has run
}

// onTheClockNow returns s with its deadlines named by the wall clock as it
// reads now. The budget's times are compared on the monotonic clock and
// keep the wall clock reading of when they were taken (T0, at the preStop
// call), which JSON alone carries: after NTP stepped the node's clock
// forward between the call and an answer, the answer named an instant the
// step before the drain's deadline, and the exec hook, comparing it with
// its clock, stopped waiting that much early (docs/faults.md row 2180);
// stepped back, it would have waited on past it when the server stopped
// answering.
func (s PreStopSummary) onTheClockNow() PreStopSummary {
	now := time.Now()
	s.DrainDeadline, s.Kill = onTheClockAt(s.DrainDeadline, now), onTheClockAt(s.Kill, now)
	return s
}

// onTheClockAt is t, when it carries a monotonic reading, named by the
// wall clock as it reads at now (time.Now()); a time without one (zero, or
// read from text) is already a wall clock reading, and is kept.
func onTheClockAt(t, now time.Time) time.Time {
	if t == t.Round(0) { // Round(0) strips a monotonic reading: t has none
		return t
	}
	return now.Add(t.Sub(now)).Round(0)
}

// preStopRun is the one drain wait that the first preStop call starts and
// later calls join.
type preStopRun struct {
	counted chan struct{} // closed after the first count (or when the wait ends)
	once    sync.Once
	done    chan struct{}
	mu      sync.Mutex
	sum     PreStopSummary
	ctx     context.Context // carries span
	span    trace.Span      // the drain phase's span
}

func (r *preStopRun) summary() PreStopSummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sum
	if !s.Done {
		s.Waited = time.Since(s.Start)
	}
	return s
}

func (r *preStopRun) markCounted() { r.once.Do(func() { close(r.counted) }) }

func (r *preStopRun) update(f func(*PreStopSummary)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.sum)
}

// PreStop returns the http.Handler for the kubelet's preStop hook (httpGet,
// or an exec hook that calls it, see ExecHook and drain/cmd/drainhook).
//
// The first call fixes T0 in the budget (Budget.OnPreStop), closes the gate,
// which turns readiness to 503, and starts the drain wait: while the Lister
// still lists running sandboxes AND the drain phase's deadline has not
// passed, it counts them again every PollInterval. The drain deadline is the
// budget's deadline minus the live reserves of the later phases (the
// preserve reserve follows the running count), so the wait always leaves
// the SIGTERM shutdown the time it needs; where that falls in the
// kubelet's last 2 s before SIGKILL, which it leaves after SIGTERM
// whenever SIGTERM comes, and the later reserves fit in them, it is the
// budget's SIGKILL, when the kubelet gives up on the hook (deadline.Plan).
// Not under the kubelet's own termination (Config.KubeletGrace): the node
// goes down at its end, 2 s after SIGTERM or not. The wait ends 300 ms before it,
// the time the kubelet may take from the hook's answer to SIGTERM (the
// preserve phase starts at SIGTERM, and a SIGKILL fixed by a
// deletionTimestamp or Config.KubeletGrace does not move with it), and the
// time a count takes more (the preserve phase lists the sandboxes before
// its first preserve), or up to one count earlier: no count starts that
// would end inside that time if it took as long as the last one. The wait
// also ends when Shutdown starts or on Force. Without a Lister the wait
// ends at once.
//
// Every call answers 200 with a JSON PreStopSummary once the wait is over; a
// second call joins the first's wait; a call after Shutdown started answers
// at once. A request with ?wait=DURATION (a Go duration) answers after at
// most that long, with Done false if the wait goes on, so a caller with a
// per-request timeout can poll; it does so even while the first count is
// still running (a slow Lister), with Running 0 and the drain deadline as
// planned at T0. ?wait=0s answers as soon as the first count is in. The
// wait itself does not depend on any request: a client that disconnects
// does not end it. An exec hook passes ?start=RFC3339 (its own start, see
// ExecHook.Start): the first call then
// fixes T0 there, if it is earlier than the call and within the grace
// period, so the hook's start-up latency is not mistaken for spare time.
//
// With Config.Pod, a later call that is a new run of the hook (each
// httpGet call without ?wait=; an exec hook's call with a new ?start=; a
// call with ?wait= and no ?start=, a shell loop's poll or an operator's,
// is none: the kubelet's httpGet sends no ?wait=), even during the
// shutdown, reads the pod's deletion again: a kubelet that runs the hook
// again (a restarted one) runs the termination over, timing the deletion's
// grace from the new run (Budget.OnRestart); the wait then ends by the new
// run's SIGKILL.
//
// When SIGTERM (Shutdown) arrives while the latest preStop request is still
// open, the kubelet has stopped waiting for the hook, which it does only
// once its grace period has run out: Shutdown then tells the budget
// (Budget.OnHookAbandoned) that SIGKILL comes 2 s after SIGTERM, whatever
// grace the budget was built with. A request without ?wait= (an httpGet
// hook's) that its client closed before the wait ended counts as still
// open: the kubelet never cancels one. A poll with ?wait= and no ?start=
// (a shell loop's, or an operator's look) is never the latest request: its
// answer leaves the kubelet's call, or another poll, open; and a poll
// still open at SIGTERM is the hook still running, abandoned too.
//
// On a Drainer not made by New the handler answers every call 500 with
// "drain: Drainer not made by drain.New", logged at Error through
// slog.Default.
func (d *Drainer) PreStop() http.Handler {
	if !d.made() {
		return notMadeHandler(notMadeDrainer)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var bound, countBound <-chan time.Time
		if v := r.URL.Query().Get("wait"); v != "" {
			wait, err := time.ParseDuration(v)
			if err != nil || wait < 0 {
				http.Error(w, "wait: want a non-negative Go duration such as 30s", http.StatusBadRequest)
				return
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			bound = t.C
			if wait > 0 { // ?wait=0s: at once, but with the first count
				countBound = t.C
			}
		}
		at := arrival(r, time.Now()) // before a HookGuard's Check held it
		if v := r.URL.Query().Get("start"); v != "" {
			start, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				http.Error(w, "start: want an RFC 3339 time", http.StatusBadRequest)
				return
			}
			// Only an earlier, recent start is believed: T0 can only move
			// earlier, never later, than this request.
			if start.Before(at) && at.Sub(start) < d.budget.Grace() {
				at = start
			}
		}
		hookRun := r.URL.Query().Get("start")
		if hookRun == "" && bound != nil {
			// A poll (?wait=) that names no run: a shell loop around
			// curl, an operator's look. The kubelet's httpGet never
			// sends ?wait=, so it is no new run of the hook; taken for
			// one, each poll would move SIGKILL later (Budget.OnRestart).
			hookRun = pollOfTheRun
		}
		seq := d.hookOpened(hookRun == pollOfTheRun)
		sum := d.preStop(r.Context(), at, hookRun, bound, countBound)
		if bound == nil && !sum.Done && r.Context().Err() != nil {
			// An httpGet call gone before the wait ended: the kubelet
			// never cancels one (it stops waiting at its grace's end), so
			// its connection was closed under it (a kubelet restarting,
			// or closing a descriptor number twice: docs/real-kubelet.md,
			// "Graceful node shutdown"). It stays open for Shutdown, which
			// then takes SIGTERM as the hook abandoned, 2 s before
			// SIGKILL: the reading that errs early.
			d.log.Warn("drain: the preStop call was closed by its client before the wait ended: SIGTERM will be taken as the kubelet's grace run out",
				"waited", sum.Waited.Round(time.Millisecond))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(sum.onTheClockNow())
		d.hookClosed(seq)
	})
}

// hookOpened records a preStop request as open and returns its number.
// A poll without ?start= (poll: a shell loop's, or an operator's look) is
// counted apart and returns 0: made beside the kubelet's httpGet call or
// beside a shell loop's poll, its answer must not take that one for
// answered (and a SIGTERM at the kubelet's grace's end for no
// abandonment). A poll open at SIGTERM is itself the hook still running:
// a poll answers as soon as the wait ends, and the hook returns after.
func (d *Drainer) hookOpened(poll bool) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if poll {
		d.pollsOpen++
		return 0
	}
	d.hooks++
	d.hookOpen = true
	return d.hooks
}

// hookClosed records that preStop request seq (0: a poll) has answered.
// Only the latest request that is no poll counts: a kubelet that runs the
// hook again (restarted) may leave the first request open.
func (d *Drainer) hookClosed(seq int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if seq == 0 {
		d.pollsOpen--
		return
	}
	if seq == d.hooks {
		d.hookOpen = false
	}
}

// preStop starts or joins the drain wait and returns its summary when it
// ends, ctx ends or bound fires; it waits for the first count unless
// countBound fires first. hookRun is the call's ?start=, "" without one.
func (d *Drainer) preStop(ctx context.Context, at time.Time, hookRun string, bound, countBound <-chan time.Time) PreStopSummary {
	run := d.startPreStop(at, hookRun)
	if run == nil {
		st := d.budget.State()
		return PreStopSummary{Start: st.Start, Done: true, Reason: reasonSIGTERM, Running: d.Running(),
			DrainDeadline: d.drainDeadline(), Kill: st.Kill}
	}
	select { // an answer carries a count, unless the count outlasts the bound
	case <-run.counted:
	case <-ctx.Done():
		return run.summary()
	case <-countBound:
		return run.summary()
	}
	select {
	case <-run.done:
	case <-ctx.Done():
	case <-bound:
	}
	return run.summary()
}

// pollOfTheRun is the hookRun of a call with ?wait= and no ?start=: a
// poll of the run under way, never a new run (the kubelet's httpGet sends
// no ?wait=). No ?start= value is it: a time has no spaces.
const pollOfTheRun = "poll of the run under way"

// startPreStop returns the drain wait, starting it on the first call. It
// returns nil when Shutdown started before any preStop call.
//
// A later call that is a new run of the hook, started at at, is the
// kubelet running the termination over (hookAgain): it restarted; so is
// one with no call before it that started after SIGTERM. hookRun
// tells runs apart: an exec hook sends its start with every poll, while
// each httpGet call is a run of its own; a poll without a start
// (pollOfTheRun) is none.
func (d *Drainer) startPreStop(at time.Time, hookRun string) *preStopRun {
	d.mu.Lock()
	defer d.mu.Unlock()
	newRun := hookRun == "" || hookRun != d.hookRun
	if hookRun == pollOfTheRun {
		newRun = false // and the run under way stays the one later calls are told from
	} else {
		d.hookRun = hookRun
	}
	if d.prestop != nil {
		if newRun {
			d.hookAgain(at)
		}
		return d.prestop
	}
	if d.started {
		// No call came before SIGTERM, and one comes now: a run of the hook
		// that began after SIGTERM is a restarted kubelet's, which calls the
		// hook again and then times its grace from that run (measured: the
		// real kubelet restarted during the preserve phase). A call of a run
		// that began before is a late one of the first run, which tells
		// nothing: the kubelet's grace for it is already running out.
		if newRun && at.After(d.budget.State().SIGTERM) {
			d.hookAgain(at)
		}
		return nil
	}
	d.budget.OnPreStop(at)
	d.gate.Close()
	t0 := d.budget.Start()
	run := &preStopRun{counted: make(chan struct{}), done: make(chan struct{}), sum: PreStopSummary{Start: t0, Reason: reasonWaiting,
		DrainDeadline: d.drainDeadline(), Kill: d.budget.Kill()}}
	// The termination's span starts here, at T0, and Shutdown ends it; the
	// wait is its first phase.
	d.rootCtx, d.root = d.tracer.Start(context.Background(), rootSpan, trace.WithTimestamp(t0))
	run.ctx, run.span = d.tracer.Start(d.rootCtx, phaseSpan(PhaseDrain), trace.WithTimestamp(t0),
		trace.WithAttributes(attribute.String(attrPhase, PhaseDrain)))
	d.prestop = run
	go d.drainWait(run)
	d.log.Info("drain: preStop: gate closed, waiting for running sandboxes", "t0", run.sum.Start, "kill", d.budget.Kill())
	// DrainStarted waits for the read: a deletion's grace, or none under
	// the kubelet's own termination (the node's end at T0 + KubeletGrace,
	// the wait by the rule to the budget's deadline), changes what the
	// drain will do, and the Event says that.
	d.readPodThen("preStop", func() {
		d.eventStarted("preStop hook called: gate closed, waiting for the running sandboxes", PhaseDrain)
	})
	return run
}

// drainWait waits while sandboxes are running and the drain deadline has
// not passed, recomputing the deadline at every count and whenever the
// budget changes.
func (d *Drainer) drainWait(run *preStopRun) {
	defer close(run.done)
	defer run.markCounted()
	reason := d.drainLoop(run)
	now := time.Now()
	var waited time.Duration
	var sum PreStopSummary
	run.update(func(s *PreStopSummary) {
		waited = now.Sub(s.Start)
		s.Done, s.End, s.Reason, s.Waited, s.Kill = true, now, reason, waited, d.budget.Kill()
		sum = *s
	})
	run.span.SetAttributes(attribute.String(attrReason, reason), attribute.Int(attrRunning, sum.Running))
	d.observePhase(run.ctx, run.span, PhaseReport{Name: PhaseDrain, Duration: waited, Result: drainResult(reason),
		Forced: reason == reasonForced})
	run.span.End(trace.WithTimestamp(now))
	d.log.Info("drain: preStop wait over", "reason", reason, "running", d.Running(), "waited", waited)
}

func (d *Drainer) drainLoop(run *preStopRun) string {
	nextProgress := time.Now().Add(progressInterval)
	for {
		if reason := d.stopReason(); reason != "" {
			return reason
		}
		// Taken before the deadline is read: a change that lands between
		// the read and the wait below closes this channel, where one asked
		// for after it would be the next change's, and the wait would
		// sleep a PollInterval past a deadline already moved.
		changed := d.budget.Changed()
		began := time.Now()
		n := d.count(d.term, d.drainDeadline())
		took := time.Since(began) // the next listing takes as long, a count's or the preserve phase's
		dl := d.drainDeadline()   // read again: the count moved the preserve reserve
		run.update(func(s *PreStopSummary) {
			if n >= 0 {
				s.Running = n
			}
			s.DrainDeadline, s.Kill = dl, d.budget.Kill()
		})
		run.markCounted()
		if n == 0 {
			return reasonDrained
		}
		left := time.Until(dl)
		// The wait ends lag before the drain deadline: the kubelet's time
		// to SIGTERM, and the listing the preserve phase makes before its
		// first preserve, which the plan's reserve does not count.
		lag := sigtermLag + took
		if left <= lag+took {
			// A count started later would end inside the lag, or be cut at
			// the deadline (and logged as a failed listing).
			if reason := d.stopReason(); reason != "" {
				return reason // Shutdown or Force stopped the count
			}
			return reasonDeadline
		}
		if now := time.Now(); !now.Before(nextProgress) {
			d.logWaitProgress(n, left)
			nextProgress = now.Add(progressInterval)
		}
		t := time.NewTimer(min(d.poll, left-lag-took))
		select {
		case <-t.C:
		case <-changed:
		case <-d.term.Done():
		case <-d.force.Done():
		}
		t.Stop()
	}
}

// drainDeadline is the drain phase's deadline as if it started now: the
// plan's (deadline.Plan lets the preStop wait run until the kubelet gives
// up on the hook when the work after SIGTERM fits in the 2 s the kubelet
// leaves after it, which come whenever SIGTERM comes). Under the kubelet's
// own termination (Config.KubeletGrace, a read that found no deletion)
// the node goes down at T0 + KubeletGrace, and does not wait for those
// 2 s: the wait then ends by the plan's rule to the budget's deadline
// (deadline.Split), which leaves the work its reserves before that end.
func (d *Drainer) drainDeadline() time.Time { return d.windowsFrom(PhaseDrain)[0].Deadline }

// windowsFrom is the plan laid out from the phase from, as if it started
// now (Plan.Windows), as the drain runs it: from the preStop wait under the
// kubelet's own termination, by the rule to the budget's deadline
// (drainDeadline).
func (d *Drainer) windowsFrom(from string) []deadline.Window {
	if from == PhaseDrain && d.own.Load() {
		return deadline.Split(time.Now(), d.budget.Deadline(), d.planned...)
	}
	return d.plan.Windows(from)
}

// stopReason says why waits must stop now, or "" when they need not.
func (d *Drainer) stopReason() string {
	switch {
	case d.force.Err() != nil:
		return reasonForced
	case d.term.Err() != nil:
		return reasonSIGTERM
	}
	return ""
}

// count lists the running sandboxes within dl (and until parent ends or Force)
// and records the count for the preserve reserve. Without a Lister it is 0;
// on a listing error it returns -1 (unknown: keep waiting) and the preserve
// reserve keeps the last count. A listing that failed after it listed some
// sandboxes (pause.Lister: a paginated listing whose later page failed)
// says that at least those run, and of the last count's others only that
// it did not reach them: the count recorded is both, the sandboxes it
// listed and the last count's it did not, so that the reserve plans for
// every sandbox known to run and the Report can name them (the safe side:
// a larger reserve ends the wait earlier).
func (d *Drainer) count(parent context.Context, dl time.Time) int {
	if d.lister == nil {
		d.running.Store(0)
		d.counted.Store(true)
		d.runGauge.Record(context.WithoutCancel(parent), 0)
		return 0
	}
	ctx, cancel := context.WithDeadline(parent, dl)
	defer cancel()
	ctx, unforce := d.forceCancel(ctx)
	defer unforce()
	// What List returned, nil when it was abandoned: a variable the call
	// wrote was read here while an abandoned List, returning late, wrote it.
	unwatch := d.watchListing(time.Now(), dl)
	sbs, err := bounded.Call(ctx, returnSlack, d.list)
	unwatch()
	switch {
	case err != nil && (parent.Err() != nil || d.force.Err() != nil):
		// Shutdown started, or Force: the count was stopped, the
		// listing did not fail.
		d.log.Debug("drain: a count of running sandboxes was stopped", "err", err)
		return -1
	case err != nil:
		d.listFailed(err)
		if len(sbs) > 0 {
			d.record(parent, sbs, d.listed.Load())
		}
		return -1
	}
	d.listWorks()
	d.record(parent, sbs, nil)
	return len(sbs)
}

// list calls the Lister for a count of drain's own. An error whose methods
// would panic (a typed nil: a nil *T returned as an error; an Error that
// reads a field of an answer that never came) is met here, in the call
// bounded.Call recovers, and replaced by one naming its type, the
// sandboxes returned with it kept: met later, by the log line's Error
// outside any recover, it ended the process mid-drain with every sandbox
// not yet preserved. Pause treats its own listings' so (docs/faults.md
// rows 1881, 1882).
func (d *Drainer) list(ctx context.Context) ([]pause.Sandbox, error) {
	sbs, err := d.lister.List(ctx)
	return sbs, readableErr(err, "the Lister", "the count failed after the sandboxes it gave")
}

// record records a count of the running sandboxes sbs; with last, the
// count before, a partial listing's (see count): last's sandboxes sbs does
// not list are counted too.
func (d *Drainer) record(parent context.Context, sbs []pause.Sandbox, last *listing) {
	size, _ := d.preserver.(sizeEstimator)
	l := newListing(sbs, time.Now(), size)
	n := len(sbs) // an element without an ID is a sandbox all the same
	if last != nil {
		listed := make(map[string]bool, len(l.ids))
		for _, id := range l.ids {
			listed[id] = true
		}
		for _, id := range last.ids {
			if !listed[id] {
				l.ids = append(l.ids, id)
				n++
			}
		}
	}
	d.listed.Store(l)
	d.running.Store(int64(n))
	d.counted.Store(true)
	d.runGauge.Record(context.WithoutCancel(parent), int64(n))
}

// watchListing logs, every progressInterval while a count's listing
// (begun at began, given until dl) has not returned, that it has not: at
// Warn the first time, then at Info, as the wait's progress line. A Lister
// that hangs (an API server that never answers) held the count to dl, the
// drain deadline in the preStop wait, and the wait's progress lines with
// it: nothing in the log for up to the whole grace. The returned function
// stops it.
func (d *Drainer) watchListing(began, dl time.Time) (stop func()) {
	var mu sync.Mutex
	stopped, lines := false, 0
	var t *time.Timer
	var tick func()
	tick = func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		level := slog.LevelInfo
		if lines++; lines == 1 {
			level = slog.LevelWarn
		}
		stands := "the plan keeps one round of preserves (no count yet)"
		if d.counted.Load() {
			stands = fmt.Sprintf("the plan counts the last count's %d running", d.running.Load())
		}
		d.log.Log(context.Background(), level, "drain: listing running sandboxes has not returned: until it does, or fails at its deadline, "+stands,
			"waited", time.Since(began).Round(time.Second), "deadline", dl)
		t = time.AfterFunc(progressInterval, tick)
	}
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(progressInterval, tick)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// listFailed logs a failed count: at Warn when its error is news (the
// first, or not the last one's), else at Debug. The wait counts every
// PollInterval, and a Lister that stays broken would log every second of
// an hour; the progress line says "running unknown" meanwhile. An error
// is told from the last by its first line: a Lister that panics fails with
// its stack, which names another goroutine at every count, and was news
// each time, its stack at Warn every second.
func (d *Drainer) listFailed(err error) {
	what, _, _ := strings.Cut(err.Error(), "\n")
	if news, n := d.listFails.Fail(what); news {
		d.log.Warn("drain: listing running sandboxes failed", "err", err, "failures", n)
	} else {
		d.log.Debug("drain: listing running sandboxes failed", "err", what, "failures", n)
	}
}

// listWorks logs, once, that a count succeeded after failures.
func (d *Drainer) listWorks() {
	if n := d.listFails.OK(); n > 0 {
		d.log.Info("drain: listing running sandboxes works again", "failures", n)
	}
}

// progressInterval is how often the preStop wait logs a progress line: the
// rhythm of the preserve phase's (pause.Config.ProgressInterval's default).
const progressInterval = 10 * time.Second

// sigtermLag is how long before the drain deadline the preStop wait ends
// (a count of the running sandboxes does not run into it):
// the kubelet's time from the hook's answer to SIGTERM (20-70 ms measured,
// 80-260 ms on a loaded node; docs/real-kubelet.md). The preserve phase
// starts at SIGTERM, and where SIGKILL is fixed (a deletionTimestamp, the
// kubelet's own grace) that time would come out of its reserve: the last
// round of preserves, which the real node shutdown lost at load 10-13.
const sigtermLag = 300 * time.Millisecond

// logWaitProgress logs the line an operator reads during a long preStop
// wait: "drain: preStop wait: 120 running, 41s to the drain deadline".
func (d *Drainer) logWaitProgress(running int, left time.Duration) {
	count := fmt.Sprintf("%d running", running)
	if running < 0 {
		count = "running unknown (listing failed)"
	}
	d.log.Info(fmt.Sprintf("drain: preStop wait: %s, %s to the drain deadline", count, roughly(left)),
		"running", running, "time_left", left)
}

// roughly rounds d for a person: whole seconds from 10 s, tenths below.
func roughly(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// A listing is what a count saw: the running sandboxes' IDs, and when;
// the estimates of those whose preserve has one of its own
// (pause.Estimated) or from its size at the rate the Preserver measured
// (pause.Sized, sizeEstimator): how many, their sum and the longest; and,
// while the Preserver has measured no rate, the sizes of the Sized ones
// without an estimate: how many, their sum and the largest.
type listing struct {
	ids      []string
	at       time.Time
	ownN     int
	ownSum   time.Duration
	ownLong  time.Duration
	sizedN   int
	sizedSum float64 // bytes
	sizedMax int64
}

// newListing is the listing of sbs, seen at, with the Sized ones
// estimated by size (nil: not by size).
func newListing(sbs []pause.Sandbox, at time.Time, size sizeEstimator) *listing {
	l := &listing{ids: sandboxIDs(sbs), at: at}
	for _, sb := range sbs {
		if e := ownEstimate(sb, size); e > 0 {
			l.ownN++
			l.ownSum = min(l.ownSum+e, math.MaxInt64/2) // saturates, far beyond any grace
			l.ownLong = max(l.ownLong, e)
		} else if b := sizeOf(sb); b > 0 && size != nil {
			l.sizedN++
			l.sizedSum += float64(b)
			l.sizedMax = max(l.sizedMax, b)
		}
	}
	return l
}

// priorLong is the estimate of the largest Sized sandbox without an
// estimate while no rate is measured, as a Run orders it (pause.Sized): a
// sandbox of the average size takes est; 0 when there is none.
func (l *listing) priorLong(est time.Duration) time.Duration {
	if l.sizedN == 0 || l.sizedSum <= 0 {
		return 0
	}
	return time.Duration(min(float64(est)*float64(l.sizedMax)*float64(l.sizedN)/l.sizedSum, math.MaxInt64/2))
}

// sizeOf is sb's size (pause.Sized), or 0 when it has none (or its method
// panics).
func sizeOf(sb pause.Sandbox) (b int64) {
	defer func() {
		if recover() != nil {
			b = 0
		}
	}()
	if sz, ok := sb.(pause.Sized); ok && !usererr.IsNil(sb) {
		return sz.Size()
	}
	return 0
}

// A sizeEstimator is a Preserver that turns a pause.Sized sandbox's size
// into the time its preserve takes, at the rate it measured, as
// *pause.Preserver does.
type sizeEstimator interface {
	SizeEstimate(size int64) (time.Duration, bool)
}

// ownEstimate is sb's estimate of its own preserve (pause.Estimated), else
// its size at the rate size has measured (pause.Sized), else 0 (also when
// its method panics: the Preserver reports that).
func ownEstimate(sb pause.Sandbox, size sizeEstimator) (e time.Duration) {
	defer func() {
		if recover() != nil {
			e = 0
		}
	}()
	if usererr.IsNil(sb) {
		return 0
	}
	if es, ok := sb.(pause.Estimated); ok {
		if e := es.EstimatedPreserve(); e > 0 {
			return e
		}
	}
	if sz, ok := sb.(pause.Sized); ok && size != nil {
		if e, ok := size.SizeEstimate(sz.Size()); ok {
			return e
		}
	}
	return 0
}

// sandboxIDs returns the IDs of sbs, leaving out nil sandboxes and those
// whose ID panics or is empty: the Preserver reports those flaws when it
// lists them itself.
func sandboxIDs(sbs []pause.Sandbox) []string {
	ids := make([]string, 0, len(sbs))
	for _, sb := range sbs {
		if id := safeID(sb); id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

func safeID(sb pause.Sandbox) (id string) {
	defer func() {
		if recover() != nil {
			id = ""
		}
	}()
	if usererr.IsNil(sb) {
		return ""
	}
	return sb.ID()
}
