//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/follow"
	"github.com/drainkit/drainkit/pause"
)

// The final sweep. The supervisor cannot close the server's admissions:
// AgentENV admits a user's resume (and a create) until its own shutdown,
// which starts only at the server step's SIGTERM, and stops accepting
// connections then. The preserve phase's Run pauses again what its later
// passes list again, but a sandbox resumed after its last listing runs on,
// and AgentENV's own shutdown pauses such sandboxes one at a time, in the
// server step's time: too slow for more than a few, and whatever it has
// not reached when the step's deadline SIGKILLs the server is lost (only
// paused records persist). So the server step lists once more just before
// the SIGTERM and pauses, in parallel, whatever runs: what can resume
// after that listing is what AgentENV's own shutdown finds in the few
// milliseconds before it gates resumes. The sweep's account is the server
// step's Detail, which drain merges into the preserve phase's before it
// logs the Report or posts DrainFinished: whatever the sweep cannot pause
// is lost, in the Report, drain's log line and the supervisor's, and the
// exit status. In front of AgentENV the sweep also lists the sandboxes in
// a transition that AgentENV shows as paused (being snapshotted, forked or
// paused: settle.go), which no listing of the preserve phase could find:
// each gets its entry, paused once it runs again, or lost with the state
// that kept it from being paused, or lost when it is answered gone (a pause
// it joined failed and AgentENV removed it: inTransition).

// sweep lists the server's sandboxes that need a pause one last time (the
// running ones; in front of AgentENV every one not paused: notPaused),
// within the server step's ctx, and pauses them: none starts after half
// the step's time, and the ones in flight are waited for until three
// quarters; in front of AgentENV, one it preserved that the server still
// lists running then is failed (stillRunning), and the ones it gave up on
// are listed until seven eighths while the server shows them being paused,
// each listed paused preserved, finished late (finishedLate); a sandbox the
// preserve phase counted lost that the server lists paused by then is
// preserved too (pausedSince). It returns its
// account (nil when it listed nothing), and an error naming the ones it
// could not pause. A listing that fails is logged at ERROR and becomes the
// Report's note (and so the termination message's), and makes the exit
// status 1 at least: a sandbox resumed since the preserve phase is not
// known preserved; one that fails after its first page (a page 2's 503)
// has what it listed paused, and the note says it was INCOMPLETE. In
// force mode it sends no pause (no new pause is sent then) but still
// lists, within a quarter of the step's time, and what it would have
// paused is in its account, not started: lost. It does nothing once the server has exited, or when no listing of
// the preserve phase succeeded (the Report says the sandboxes are unknown;
// another failing listing would only take the server's time).
func (s *supervisor) sweep(ctx context.Context) (*pause.Report, error) {
	if !s.preserver.listed.Load() {
		return nil, nil
	}
	select {
	case <-s.server.done:
		return nil, nil
	default:
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return nil, nil // a step always has a deadline
	}
	var rep *pause.Report
	var pausedSince map[string]bool
	select {
	case <-s.drainer.Forced():
		rep = s.listForced(ctx, time.Now().Add(time.Until(dl)/4))
	default:
		var err error
		if rep, pausedSince, err = s.sweepRun(ctx); err != nil {
			return nil, err
		}
	}
	return s.sweepAccount(ctx, rep, pausedSince)
}

// sweepRun pauses what the sweep lists, by the step's deadline (see sweep),
// laid out again wherever the step's deadline moves earlier while it runs
// (sweepWindow). It returns the sweep's account, with the sandboxes the
// preserve phase counted lost that the server lists paused since
// (pausedSince), and their IDs.
func (s *supervisor) sweepRun(ctx context.Context) (*pause.Report, map[string]bool, error) {
	// A Preserver of its own: what the sweep pauses (resumed sandboxes, a
	// few) says nothing of the node's knee or of a pause's time, which the
	// drain keeps for the next one. Its limit is the drain's level, or the
	// adaptive limit while the drain measured none (sweepConfig).
	pc := s.preserver.sweepConfig()
	pc.Estimator = deadline.NewEstimator(max(s.preserver.Estimator().Estimate(), time.Millisecond))
	pc.Logger, pc.MeterProvider = s.log.With("run", "final sweep"), s.meters // pause's retries: until the step's deadline
	p, err := pause.New(named(s.sweepList), pc)
	if err != nil {
		return nil, nil, fmt.Errorf("final sweep: %w", err)
	}
	starts, settling, end := s.sweepWin.begin(ctx, p)
	defer end()
	// No pause starts after Force either, as no preserve does (see
	// drain.Drainer.Force); one landing before the sweep sends none
	// (listForced). Laid out again in the reserve Force leaves the step
	// (serverStep.Tighten) alone, the sweep went on starting pauses until
	// that layout's half, taking the reserve's time from the server's
	// SIGTERM and the daemon step after it (docs/faults.md row 820).
	starts, stopStarting := context.WithCancelCause(starts)
	defer stopStarting(nil)
	go func() {
		select {
		case <-s.drainer.Forced():
			stopStarting(drain.ErrForced)
		case <-starts.Done():
		}
	}()
	rep := p.Run(starts, s.sweepWin.hard())
	// The check first: the wait for the pauses given up on may last until
	// settling ends, and the check's listing, after it, was cut before it
	// was sent, a sandbox still running left preserved (docs/faults.md
	// row 1981). A pause the wait sees finish was listed paused: no check
	// is owed it.
	s.stillRunning(settling, rep)
	since := s.pausedSince(settling, rep)
	s.finishedLate(settling, rep, s.sweepWin.settled())
	return rep, since, nil
}

// pausedSince gives rep, the final sweep's account in front of AgentENV
// (settle.go), an entry, preserved, for each sandbox the preserve phase
// counted lost that rep has none for and that the server lists paused
// (state=paused: its record durable), and returns their IDs. A pause whose
// answer never came (a proxy that dropped its connection after the phase
// deadline, when no retry fits) is one the server goes on with: finished
// before the sweep listed, the sandbox was left out of the sweep's
// listing of those not paused, and its lost entry stood: the Report, the
// exit status and the termination message counted lost a sandbox the
// server had paused (docs/faults.md row 2160). It lists only when there
// is such a sandbox; a listing that fails leaves them lost, and says so.
func (s *supervisor) pausedSince(ctx context.Context, rep *pause.Report) map[string]bool {
	l, ok := s.sweepList.(*notPaused)
	if !ok || rep.Unknown {
		return nil
	}
	swept := make(map[string]bool, len(rep.Entries))
	for _, e := range rep.Entries {
		swept[e.ID] = true
	}
	lost := slices.DeleteFunc(s.preserver.lostIDs(), func(id string) bool { return swept[id] })
	if len(lost) == 0 {
		return nil
	}
	sbs, err := l.paused.List(ctx)
	at := time.Now()
	if err != nil && len(sbs) == 0 {
		s.log.Warn("supervisor: final sweep: the listing of the paused sandboxes failed; the ones the preserve phase counted lost are not seen paused",
			"lost", len(lost), "error", err)
		return nil
	}
	listedPaused := idSet(sandboxIDs(sbs))
	since := map[string]bool{}
	for _, id := range lost {
		if !listedPaused[id] {
			continue
		}
		since[id] = true
		rep.Entries = append(rep.Entries, pause.Entry{ID: id, Outcome: pause.Preserved, Pass: 1, End: at,
			Error: fmt.Sprintf("listed paused by the final sweep at %s after the preserve phase counted it lost: the server finished a pause "+
				"the preserve phase got no answer to, or another paused it", at.Format(time.RFC3339Nano))})
	}
	if len(since) > 0 {
		if rep.Counts == nil {
			rep.Counts = map[pause.Outcome]int{}
		}
		rep.Counts[pause.Preserved] += len(since)
		s.log.Warn("supervisor: final sweep: sandboxes the preserve phase counted lost are listed paused: preserved",
			"found", len(since), "ids", strings.Join(slices.Sorted(maps.Keys(since)), " "))
	}
	return since
}

// A sweepWindow is the final sweep's layout in the server step's time, from
// the sweep's start to the step's deadline: no pause starts after half of
// it, the ones in flight are waited for until three quarters (the server
// would finish them before it exits anyway), and the ones given up on then
// are listed until seven eighths, while the server is still pausing them
// (it would wait for them at its SIGTERM anyway): the rest is the
// server's, to exit by itself after its SIGTERM.
//
// The step's deadline can move earlier while the sweep runs: a budget
// that moves SIGKILL earlier (a deletion read with a shorter grace), or
// Force, which leaves the step its reserve. drain tells the step first
// (serverStep.Tighten), then cancels its context there. The sweep is laid
// out again in what is left, its Preserver told its new hard deadline
// (pause.Preserver.Tighten). Laid out once, its pauses in flight ran to
// the hard deadline of the old layout, which pause leaves them when its
// context ends, past the step's new deadline: the step did not return,
// drain abandoned it with the sweep's account, the server got its SIGTERM
// only when the sweep returned, in the daemon step's time, and a sandbox
// the sweep had found running again was in no account. Should a move land
// before the Preserver's Run is in progress (Tighten does nothing then),
// the Preserver is told again at the layout's three quarters, and the
// step's context ending ends the pauses in flight at the latest.
type sweepWindow struct {
	mu   sync.Mutex
	p    *pause.Preserver // the sweep's, while it runs; nil otherwise
	from time.Time        // the sweep's start
	dl   time.Time        // the step's deadline the layout is for

	// startBy is the half of the layout as it stands, which only moves
	// earlier: the Deadline of the context in which pauses start (begin).
	// One per sweep: a sweep's layout is not a later one's.
	startBy                           *follow.Deadline
	end, settleBy                     time.Time
	startTimer, settleTimer, endTimer *time.Timer
	stopStarts, stopSettle            context.CancelFunc
}

// begin registers the sweep's Preserver p and lays the sweep out in the
// step's ctx, whose deadline it reads after registering, so that a move
// from then on reaches tighten. It returns the context in which pauses
// start, the one in which the pauses given up on are listed, and the
// sweep's end, which unregisters it.
func (w *sweepWindow) begin(ctx context.Context, p *pause.Preserver) (starts, settling context.Context, end func()) {
	w.mu.Lock()
	w.p, w.from = p, time.Now()
	w.dl, _ = ctx.Deadline() // a step always has one (sweep)
	// The context in which pauses start ends at the half of the layout
	// as it stands (startTimer), and says so (its Deadline is startBy's,
	// read at each call, the earlier of it and the step's): pause reads
	// its Deadline as the phase deadline, the listing's context has it,
	// and so do the logs. Made once with the first layout's half, it
	// reported that half after a layout again had cancelled it earlier
	// (docs/faults.md row 850).
	started, stopStarts := context.WithCancel(ctx)
	settling, stopSettle := context.WithCancel(ctx)
	w.stopStarts, w.stopSettle = stopStarts, stopSettle
	w.startBy = new(follow.Deadline)
	w.layout()
	starts = w.startBy.Context(started)
	w.mu.Unlock()
	cut := context.AfterFunc(ctx, func() { p.Tighten(time.Now()) })
	return starts, settling, func() {
		cut()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.p = nil
		w.stopTimers()
		stopStarts()
		stopSettle()
	}
}

// layout lays the sweep out from its start to w.dl (see sweepWindow).
func (w *sweepWindow) layout() {
	left := w.dl.Sub(w.from)
	startBy := w.from.Add(left / 2)
	w.startBy.Move(startBy) // only ever earlier: dl moves only earlier (tighten)
	w.end, w.settleBy = w.from.Add(left*3/4), w.from.Add(left*7/8)
	if w.startTimer != nil {
		w.stopTimers()
	}
	w.startTimer = time.AfterFunc(time.Until(startBy), w.stopStarts)
	w.settleTimer = time.AfterFunc(time.Until(w.settleBy), w.stopSettle)
	// The Preserver is told the hard deadline again when it comes: a
	// layout that landed after the sweep read hard and before its Run was
	// in progress told it nothing (pause.Preserver.Tighten does nothing
	// then), and its pauses in flight ran past this end to the step's
	// context's, leaving the server no time between its SIGTERM and its
	// SIGKILL (docs/faults.md row 822).
	p, end := w.p, w.end
	w.endTimer = time.AfterFunc(time.Until(end), func() { p.Tighten(end) })
}

// stopTimers stops the layout's timers. Called with mu held.
func (w *sweepWindow) stopTimers() {
	w.startTimer.Stop()
	w.settleTimer.Stop()
	w.endTimer.Stop()
}

// tighten lays the sweep in progress out again for the step's deadline dl,
// if that is earlier, and tells its Preserver its new hard deadline. It
// reports whether it moved anything.
func (w *sweepWindow) tighten(dl time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.p == nil || !dl.Before(w.dl) {
		return false
	}
	w.dl = dl
	w.layout()
	w.p.Tighten(w.end)
	return true
}

// hard is the hard deadline of the sweep's pauses, as laid out now.
func (w *sweepWindow) hard() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.end
}

// settled is when the listing of the pauses the sweep gave up on ends, as
// laid out now.
func (w *sweepWindow) settled() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.settleBy
}

// A serverStep is the server step (Run: stopServer) with the final sweep's
// Tighten: drain calls it when its budget moves SIGKILL earlier while the
// step runs, or Force leaves it its reserve, and the sweep in progress is
// laid out again before the new deadline (sweepWindow). A drain.NewStep
// alone has no Tighten.
type serverStep struct {
	drain.Step
	sweep *sweepWindow
}

// Tighten is the final sweep's (sweepWindow.tighten).
func (st serverStep) Tighten(dl time.Time) bool { return st.sweep.tighten(dl) }

// listForced is the sweep in force mode: it lists, by deadline by, and
// accounts for every sandbox listed as not started (no pause is sent in
// force mode), as a Run's not_started entries are: End when the listing
// answered, no Start (never started), the size the listing gave it. A
// listing that fails is an Unknown account; one that fails after listing
// some (a page 2's 503: pause.Lister) accounts for those and is
// Incomplete, as a Run's would be. In front of AgentENV it lists only the
// sandboxes known not paused (notPaused.known): one its listing of the
// paused ones did not reach is paused, most likely, and not known to run.
func (s *supervisor) listForced(ctx context.Context, by time.Time) *pause.Report {
	lctx, cancel := context.WithDeadline(ctx, by)
	defer cancel()
	start := time.Now()
	rep := &pause.Report{Start: start, Deadline: start, Passes: 1, Counts: map[pause.Outcome]int{}}
	l := s.sweepList
	if np, ok := l.(*notPaused); ok {
		l = pause.ListFunc(np.known)
	}
	sbs, err := named(l).List(lctx)
	rep.End = time.Now()
	if err != nil {
		rep.ListErr = err.Error()
		if len(sbs) == 0 {
			rep.Unknown = true
			return rep
		}
		rep.Incomplete = true
	}
	for _, sb := range sbs {
		e := pause.Entry{ID: sb.ID(), Outcome: pause.NotStarted, Pass: 1, End: rep.End,
			Error: "force mode: no new pause is sent"}
		if sz, ok := sb.(pause.Sized); ok {
			e.Size = sz.Size()
		}
		rep.Entries = append(rep.Entries, e)
		rep.Counts[pause.NotStarted]++
	}
	return rep
}

// named lists what l lists but the sandboxes without an ID (httpsource
// lists a running one so, with the ID ""): the preserve phase's passes
// listed them and its account has each, failed, since no pause can name
// one; the sweep is for sandboxes running again, and cannot tell such a
// sandbox from another.
func named(l pause.Lister) pause.Lister {
	return pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		sbs, err := l.List(ctx)
		return slices.DeleteFunc(sbs, func(sb pause.Sandbox) bool { return sb != nil && sb.ID() == "" }), err
	})
}

// sweepAccount logs the sweep's account rep and returns it (nil when it
// listed nothing, or could not list), with an error naming the sandboxes
// it did not pause. A listing that failed, or failed after its first page
// (INCOMPLETE), is logged at ERROR and kept for the Report's note, and
// makes the exit status 1 at least (report).
func (s *supervisor) sweepAccount(ctx context.Context, rep *pause.Report, pausedSince map[string]bool) (*pause.Report, error) {
	switch {
	case rep.Unknown:
		s.log.Error("supervisor: final sweep: the server's sandboxes could not be listed after the preserve phase; a sandbox resumed since is not known",
			"error", rep.ListErr)
		// The preserve phase's account stands; the log, the Report's note
		// and the termination message say what is not known.
		s.sweepUnknown.Store(&sweepFault{
			note:    "final sweep: the sandboxes could not be listed after the preserve phase, a sandbox resumed since is not known: " + rep.ListErr,
			verdict: "final sweep UNKNOWN: sandboxes resumed since not known"})
		return nil, nil
	case rep.Incomplete:
		// Its listings failed after their first page: what they listed
		// is in the account, and the rest is not known, as above. Said
		// even when they listed none to account for.
		s.log.Error("supervisor: final sweep: the listing of the server's sandboxes after the preserve phase was INCOMPLETE; a sandbox resumed since that it did not reach is not known",
			"listed", len(rep.Entries), "error", rep.ListErr)
		s.sweepUnknown.Store(&sweepFault{
			note:    "final sweep: the listing after the preserve phase was INCOMPLETE, a sandbox resumed since that it did not reach is not known: " + rep.ListErr,
			verdict: "final sweep INCOMPLETE: sandboxes resumed since not known"})
		if len(rep.Entries) == 0 {
			return nil, nil
		}
	case len(rep.Entries) == 0:
		s.log.Info("supervisor: final sweep: nothing running again after the preserve phase")
		return nil, nil
	}
	// The sandboxes the preserve phase could not pause (their pause failed,
	// timed out or was not started) never stopped running: the sweep tries
	// them again, but they are not running again, resumed or created. Said
	// so, the log and the step's error (the termination message's) would
	// send the operator looking for users' resumes where the cause is the
	// server's answer to the preserve phase (docs/faults.md row 1182). Each
	// kind has its line and its part of the error.
	var again, failed []pause.Entry
	for _, e := range rep.Entries {
		if pausedSince[e.ID] {
			continue // paused, neither running again nor still running: pausedSince logged them
		}
		if s.preserver.couldNotPause(e.ID) {
			failed = append(failed, e)
		} else {
			again = append(again, e)
		}
	}
	lost := slices.DeleteFunc([]string{
		s.sweptKind(ctx, again, "sandboxes running again after the preserve phase (resumed or created: the server admits both until its own shutdown), or not paused yet (snapshotted or forked: they run again after)",
			"running again after the preserve phase not paused"),
		s.sweptKind(ctx, failed, "sandboxes the preserve phase could not pause, still running",
			"the preserve phase could not pause, still running, not paused either"),
	}, func(part string) bool { return part == "" })
	if len(lost) > 0 {
		return rep, errors.New("final sweep: " + strings.Join(lost, "; "))
	}
	return rep, nil
}

// sweptKind logs what the final sweep made of entries, the sandboxes of one
// kind (sweepAccount), under msg: at ERROR when it lost any, else at WARN.
// It returns the error's part for the ones it lost, "" for none: "N of M
// sandboxes " and what, then their IDs.
func (s *supervisor) sweptKind(ctx context.Context, entries []pause.Entry, msg, what string) string {
	if len(entries) == 0 {
		return ""
	}
	paused, lost := 0, 0
	for _, e := range entries {
		switch {
		case e.Outcome == pause.Preserved:
			paused++
		case e.Outcome.Lost():
			lost++
		}
	}
	level := slog.LevelWarn
	if lost > 0 {
		level = slog.LevelError
	}
	s.log.Log(ctx, level, "supervisor: final sweep: "+msg, "found", len(entries), "paused", paused, "lost", lost, "ids", ids(entries, nil))
	if lost == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d sandboxes %s: %s", lost, len(entries), what, ids(entries, pause.Outcome.Lost))
}

// finishedLate waits, until by, for the pauses of rep the sweep gave up on
// (timed out) that the server goes on with, in front of AgentENV (settle.go):
// each one listed paused is preserved, its error saying it finished late,
// and rep's counts are computed again.
func (s *supervisor) finishedLate(ctx context.Context, rep *pause.Report, by time.Time) {
	l, ok := s.sweepList.(*notPaused)
	if !ok {
		return
	}
	var timedOut []string
	for _, e := range rep.Entries {
		if e.Outcome == pause.TimedOut {
			timedOut = append(timedOut, e.ID)
		}
	}
	if len(timedOut) == 0 {
		return
	}
	s.log.Warn("supervisor: final sweep: waiting for the pauses it gave up on, which the server goes on with",
		"sandboxes", len(timedOut), "until", by.Format(time.RFC3339Nano))
	settled, err := l.settle(ctx, timedOut, by)
	if err != nil {
		s.log.Error("supervisor: final sweep: the listing that would show the pauses it gave up on finished failed; the ones not seen paused count lost",
			"sandboxes", len(timedOut), "seen_paused", len(settled), "error", err)
	}
	if len(settled) == 0 {
		return
	}
	counts := map[pause.Outcome]int{}
	for i := range rep.Entries {
		e := &rep.Entries[i]
		if at, ok := settled[e.ID]; ok {
			e.Error = fmt.Sprintf("finished late: the sweep gave up on its pause at %s (%s); the server finished it, listed paused at %s",
				e.End.Format(time.RFC3339Nano), e.Error, at.Format(time.RFC3339Nano))
			e.Outcome, e.End = pause.Preserved, at
			e.Duration = at.Sub(e.Start)
			s.log.Warn("supervisor: final sweep: a pause it gave up on finished late: preserved", "sandbox", e.ID, "error", e.Error)
		}
		counts[e.Outcome]++
	}
	rep.Counts = counts
}

// stillRunning fails each sandbox of rep preserved that the server still
// lists running once the sweep's Run is over, in front of AgentENV
// (settle.go), whose pause answers 204 once the sandbox is paused and
// whose listing says so at once: its pause was answered success without
// pausing it (a 200 from something in front of AgentENV, a server that
// does not pause), or it was resumed since. Either way it runs, and the
// server's SIGTERM, which only this sweep comes before, ends it unpaused.
// Counted preserved, the Report said 0 lost of a sandbox the next
// listing showed running (docs/faults.md row 1372). It lists only when
// the sweep preserved any, and before the wait for the pauses the sweep
// gave up on (finishedLate), which may use ctx's time up (row 1981); a
// listing that fails leaves rep as the pauses' answers made it, and says
// so.
func (s *supervisor) stillRunning(ctx context.Context, rep *pause.Report) {
	l, ok := s.sweepList.(*notPaused)
	if !ok || rep.Counts[pause.Preserved] == 0 {
		return
	}
	sbs, _, err := l.list(ctx)
	if err != nil {
		s.log.Warn("supervisor: final sweep: the listing after its pauses failed; the sandboxes it preserved are not seen paused",
			"preserved", rep.Counts[pause.Preserved], "listed", len(sbs), "error", err)
	}
	running := map[string]bool{}
	for _, sb := range sbs {
		if sz, ok := sb.(*sizedSandbox); ok {
			sb = sz.Sandbox
		}
		if _, moving := sb.(inTransition); !moving {
			running[sb.ID()] = true
		}
	}
	at := time.Now()
	counts := map[pause.Outcome]int{}
	for i := range rep.Entries {
		e := &rep.Entries[i]
		if e.Outcome == pause.Preserved && running[e.ID] {
			e.Outcome, e.End = pause.Failed, at
			e.Error = fmt.Sprintf("not paused: AgentENV lists it running after the final sweep (at %s), whose pause of it was answered success "+
				"(%d attempts): the answer did not pause it (AgentENV's is 204 once paused), or it was resumed since",
				at.Format(time.RFC3339Nano), e.Attempts)
			s.log.Error("supervisor: final sweep: a sandbox it preserved is listed running after the final sweep; counted failed",
				"sandbox", e.ID, "attempts", e.Attempts)
		}
		counts[e.Outcome]++
	}
	rep.Counts = counts
}

// A sweepFault is what the final sweep could not list: the Report's note,
// with the error, and the few words the termination message's verdict
// adds.
type sweepFault struct{ note, verdict string }

// ids lists the entries' IDs with their outcomes, those for which keep is
// true (every one when keep is nil), at most ten.
func ids(entries []pause.Entry, keep func(pause.Outcome) bool) string {
	const most = 10
	var out []string
	n := 0
	for _, e := range entries {
		if keep != nil && !keep(e.Outcome) {
			continue
		}
		if n++; n <= most {
			out = append(out, e.String())
		}
	}
	if n > most {
		out = append(out, fmt.Sprintf("and %d more", n-most))
	}
	return strings.Join(out, " ")
}
