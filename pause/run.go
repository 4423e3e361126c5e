package pause

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/drainkit/drainkit/internal/follow"
)

// A run is the state of one Run call. Only the Run goroutine touches its
// plain fields; preserve goroutines touch their own task and the atomics.
type run struct {
	p     *Preserver
	cfg   *config
	ctx   context.Context    // Run's context, carrying the run span
	work  context.Context    // parent of every Preserve's context: &workCtx, or ctx (contexts)
	cut   context.CancelFunc // ends the phase and work: at Tighten's hard deadline, and at close
	span  trace.Span
	phase time.Time
	// hard, reported (with the flags below), cut and cutAt are guarded
	// by hardMu: Tighten reaches the run from its first instruction (see
	// Preserver.Run).
	hard   time.Time
	hardMu sync.Mutex
	cutAt  *time.Timer // calls cut at the hard deadline Tighten set; nil until contexts made cut
	// tight is the hard deadline Tighten moved the Run to, none until one
	// did (then the Report says it); moved under hardMu, read without it
	// by the Deadline of the Run's contexts (follow.Context) and by
	// phaseEnd.
	tight follow.Deadline
	// The phase's context (ctx, the Lister's) and the Preserves' (work),
	// in the run: no allocation of their own. Their Deadline follows
	// Tighten: see contexts. The phase's is a follow.Phase: a Preserve
	// finds the phase deadline from its context (follow.StartBy).
	phaseCtx follow.Phase
	workCtx  follow.Context

	sem   *semaphore.Weighted // the ceiling (adaptive) or the limit (fixed)
	limit int

	rep     *Report
	seen    idSet          // every ID listed, with the index of its entry
	flaws   map[string]int // flawed listing elements reported, by kind and ID
	lastIDs []int32        // by index in the last listing, 1 + the index of the entry of its ID; 0 where not in seen
	cur     *pass          // the pass running now; set before its workers start

	unknown time.Duration // Estimator estimate for tasks without one, per pass
	perByte float64       // the pass's time per byte of a Sized sandbox, ns

	// Flags, side by side: a run is allocated per Run, and each bool
	// among wider fields takes eight bytes. Past 1016 bytes the run takes
	// the next size class (1,152 B: the allocation's 8-byte header), a
	// Run of 10 no-ops 128 B more.
	traced       bool // per-sandbox spans only when the run span records
	listed       bool // a listing succeeded
	partly       bool // a listing that failed gave sandboxes
	untimed      bool // perByte ranks sizes but is not a time
	adaptive     bool // the limit adapts (see limit.go)
	progressDone bool // the Run returned: log no more (under progressMu)
	// reported (under hardMu): finish read hard for the Report, which a
	// move would now contradict. A Tighten that loaded the run just
	// before Run stopped being the one in progress takes hardMu after that.
	// From then too, a Preserve abandoned that returns is past the Report
	// (see late).
	reported  bool
	unitBytes bool // the first pass had Sized sandboxes: units are scaled sizes (limit.go)
	// late (under hardMu) is what the Report makes of the preserves
	// abandoned while running; nil until one is. A pointer: a slice here
	// takes 16 bytes more, and the run the next size class (see the
	// flags above).
	late *abandonments

	// wake wakes the Run goroutine, the one that waits on it (listOnce,
	// waitRoom, await): room below the limit, a worker that ended, the
	// last preserve of a pass settled, a Tighten, a listing's answer
	// (poke). One channel for all, where each had its own (a channel is an
	// allocation of a Run): the Run goroutine waits for one thing at a
	// time, and re-reads what it waits for when woken, so a wake meant for
	// another is only a look. Every wake taken is followed by woken.
	wake chan struct{}
	// calls is where the calls of a listing whose every call answered left
	// their answers, emptied: the next listing's (listOnce), which makes
	// one only when none is here.
	calls *listCalls

	// The adaptive limit (see limit.go); mu guards what follows it while
	// workers run.
	unitScale     float64 // units per byte, fixed at the first pass
	unitUnknown   float64 // units of a task without size or estimate
	startedUnits  float64 // units of the preserves started, for bestThroughput
	startedN      int     // preserves started
	mu            sync.Mutex
	climb         climber
	queue         queueStats
	workers       int     // workers started and not gone
	inflight      int     // preserves running
	inflightUnits float64 // their units
	area          float64 // integral of inflight over time, ns
	areaAt        time.Time
	// The counts a progress line reports, kept only when one can be
	// logged (cfg.progress > 0): four atomic additions per sandbox, on
	// words every worker writes, are a cost no one would read otherwise.
	left     atomic.Int64 // sandboxes listed and not settled
	finished atomic.Int64 // sandboxes settled
	// Of them, preserved and failed (or timed out): 32 bits, as a
	// listing's indices are (lastIDs), leave the word listing takes.
	preservedN atomic.Int32
	failedN    atomic.Int32
	// listing is the listing in progress, for the line (see listingState);
	// 0 when none is. Without it a line logged while the first listing
	// hangs said "preserved 0/0", the line of a node with no sandboxes.
	listing atomic.Int64

	progress   *time.Timer // logs progress; nil when off
	progressMu sync.Mutex  // held while a progress line is logged

	// marks holds the panics logged once per Run (loggedClassifier,
	// loggedHint) and whether a wake is pending (wakePending, see poke):
	// one word, not an atomic.Bool (four bytes) each, leaves retrying its
	// room in the run's size class.
	marks atomic.Uint32
	// retrying counts, for the progress line, the sandboxes that failed an
	// attempt and are waiting for, or making, a retry; kept only when a
	// line can be logged, as the counts above.
	retrying atomic.Int32
}

// The marks of a Run (run.marks): the panics it logs once, and a wake
// pending.
const (
	loggedClassifier uint32 = 1 << iota // Config.Permanent panicked
	loggedHint                          // an error's RetryAt or WaitRetry panicked
	wakePending                         // a poke sent a wake the Run goroutine has not taken (poke, woken)
	loggedTelemetry                     // the Preserver's telemetry panicked or ended its goroutine as a sandbox settled (task.toldOff)
)

// firstLog reports whether the panic of kind was not logged yet in this
// Run, and marks it logged.
func (r *run) firstLog(kind uint32) bool {
	return r.marks.Or(kind)&kind == 0
}

// newRun makes the state of a Run called with ctx and hard and registers
// it as the Run in progress (p.cur) before anything else: a Tighten from
// the moment Run is called moves its hard deadline, however long what
// follows takes (a slow log sink, a slow span exporter).
//
// It calls no code of the user's: begin, after Run defers close, does.
func (p *Preserver) newRun(ctx context.Context, hard time.Time) *run {
	start := time.Now() // the Report's Start and the in-flight integral's: one clock reading
	r := &run{p: p, cfg: &p.cfg, wake: make(chan struct{}, 1)}
	r.phase, r.hard = deadlines(ctx, hard)
	p.cur.Store(r)
	r.takeSpare()
	r.slots(start) // before the span: it carries the limit the Run starts at
	r.rep = &Report{Start: start, Deadline: r.phase, Counts: make(map[Outcome]int)}
	return r
}

// begin starts the Run made by newRun with ctx and hard: its span, its
// contexts, its progress line and its first line.
func (r *run) begin(ctx context.Context, hard time.Time) {
	p := r.p
	_, given := deadlines(ctx, hard) // the hard deadline Run was given, which a Tighten since may have moved
	r.ctx, r.span = p.tel.tracer.Start(ctx, "pause.Run")
	if r.traced = r.span.IsRecording(); r.traced { // a span that records nothing would drop them
		r.span.SetAttributes(
			attribute.String("drainkit.pause.deadline", fmtTime(r.phaseEnd())),
			attribute.String("drainkit.pause.hard", fmtTime(given)),
			attribute.Int("drainkit.pause.limit", r.limit),
			attribute.Int("drainkit.pause.max_limit", p.cfg.maxLimit),
			attribute.Bool("drainkit.pause.cancel_at_deadline", p.cfg.cancelAtDeadline),
		)
	}
	r.contexts()
	if !given.Equal(r.phase) {
		r.rep.Hard = given // finish puts there the one Tighten moved it to
	}
	r.startProgress()
	if p.cfg.log.Enabled(r.ctx, slog.LevelInfo) { // time_left formats a string: only for a line written
		p.cfg.log.LogAttrs(r.ctx, slog.LevelInfo, "pause: run started",
			slog.String("time_left", fmtLeft(r.phaseEnd())), slog.Int("limit", r.limit),
			slog.Int("max_limit", p.cfg.maxLimit), slog.Bool("cancel_at_deadline", p.cfg.cancelAtDeadline))
	}
}

// contexts bounds Run's context by the phase deadline and derives the
// parent of every Preserve's context: Run's own with CancelAtDeadline; by
// default one that ignores the phase and ends at the hard deadline, as a
// Tighten since Run's call left it. cut ends both, for a Tighten: a hard
// deadline moved before the phase deadline ends the phase too. It holds
// hardMu: a Tighten from now finds cut, and one before has it armed here.
// The work context is one context with its own cancel, which cut and close
// both call: a cancel of its own under another of Tighten's cost a Run six
// allocations (two cancelCtx, their closures, the children map and done
// channel of the one in the middle) and their time. Both are wrapped, in
// the run, so that their Deadline follows Tighten (follow.Context over
// tight): a Preserve that sizes its work by ctx.Deadline() (a request
// timeout, a cheaper checkpoint when time is short) then plans for the
// time it has, where a Tighten ends the wrapped context earlier by a
// cancel, which no deadline says. The wrapper embeds the context, so a
// child still registers with its cancelCtx and starts no goroutine; its
// cancellation is the wrapped context's, unchanged. The phase's is a
// follow.Phase, which the Preserves' carries on (WithoutCancel passes
// values): a Preserve that sends a request again after a server's
// Retry-After (httpsource) finds there, with follow.StartBy, the phase
// deadline past which it must start nothing new, as the Run starts no
// retry, where its context's Deadline is the hard one.
//
// A Run given neither deadline, under a context that nothing can cancel
// (Done is nil: context.Background, a server's own), has one context for
// both: only cut can end either, and it ends both at once, so two were
// the same context twice over, four allocations of a Run's 33 (a cancelCtx
// and its cancel func, the WithoutCancel, the chained cancel).
func (r *run) contexts() {
	r.hardMu.Lock()
	defer r.hardMu.Unlock()
	if r.hard.IsZero() && r.ctx.Done() == nil { // no phase deadline either (deadlines)
		var cut context.CancelFunc
		r.ctx, cut = context.WithCancel(r.ctx)
		r.phaseCtx = r.tight.Phase(r.ctx)
		r.ctx = &r.phaseCtx
		r.work, r.cut = r.ctx, cut
		return
	}
	var endPhase, cutWork context.CancelFunc
	if !r.phase.IsZero() {
		r.ctx, endPhase = context.WithDeadline(r.ctx, r.phase)
	} else {
		r.ctx, endPhase = context.WithCancel(r.ctx) // no deadline: ended by cut alone
	}
	r.phaseCtx = r.tight.Phase(r.ctx)
	r.ctx = &r.phaseCtx
	var work context.Context
	switch {
	case r.cfg.cancelAtDeadline:
		work, cutWork = context.WithCancel(r.ctx)
	case r.hard.IsZero():
		work, cutWork = context.WithCancel(context.WithoutCancel(r.ctx))
	default:
		work, cutWork = context.WithDeadline(context.WithoutCancel(r.ctx), r.hard)
	}
	r.workCtx = r.tight.Context(work)
	r.work = &r.workCtx
	r.cut = chain(endPhase, cutWork)
	if _, moved := r.tight.Get(); moved {
		r.cutAt = time.AfterFunc(time.Until(r.hard), r.cut)
	}
}

// phaseEnd returns the phase deadline as Tighten may have moved it: a
// hard deadline moved before it ends the phase there (tighten). The
// schedule, the log lines' time_left and the Report read it, so that a
// pass after a Tighten is ordered for the time it has.
func (r *run) phaseEnd() time.Time {
	end, _ := r.tight.Cap(r.phase, !r.phase.IsZero())
	return end
}

// hardline returns the hard deadline, as Tighten may have moved it.
func (r *run) hardline() time.Time {
	r.hardMu.Lock()
	defer r.hardMu.Unlock()
	return r.hard
}

// tighten moves the hard deadline to hard if that is earlier: the running
// preserves' contexts end then, as at the hard deadline Run was given, and
// so does the phase, if it has not ended before: no preserve starts, and
// no listing is waited for, past the deadline everything must be over by.
// Before contexts made them, the move is all: contexts arms the cut.
func (r *run) tighten(hard time.Time) bool {
	r.hardMu.Lock()
	defer r.hardMu.Unlock()
	if r.reported || !r.hard.IsZero() && !hard.Before(r.hard) {
		return false
	}
	r.hard = hard
	r.tight.Move(hard) // the Run's contexts say it from now (follow.Context)
	if r.cutAt != nil {
		r.cutAt.Stop()
	}
	if r.cut != nil {
		r.cutAt = time.AfterFunc(time.Until(hard), r.cut)
	}
	r.poke() // a pass waiting for its preserves waits no longer than hard
	return true
}

// slots makes the semaphore: the limit's slots when it is fixed; the
// ceiling's when it adapts, the limit then being enforced under r.mu. An
// adaptive Run starts at the limit the Preserver ended its last Run with;
// the first one, given a Config.Limit to adapt from, starts at the default
// start and may jump to Config.Limit after its first epoch (adapt.go, "A
// start from what was learned"); now is the Run's start.
func (r *run) slots(now time.Time) {
	r.limit = r.cfg.limit
	r.adaptive = r.cfg.adaptive
	if r.adaptive {
		r.limit = min(max(int(r.p.limit.Load()), 1), r.cfg.maxLimit) // the start, not a learned level Limit reports
		r.areaAt = now
		r.climb.init(r.limit, r.cfg.maxLimit, r.areaAt)
		if t := int(r.p.target.Swap(0)); t > 0 && t != r.limit {
			r.climb.target = t
		}
	}
	r.p.limit.Store(int64(r.limit))
	if r.sem == nil { // none left by the Run before (takeSpare)
		r.sem = semaphore.NewWeighted(int64(r.cfg.maxLimit))
	}
}

// A runSpare is what a Run leaves to the next Run of its Preserver, which
// then makes none of it: the table of its set of IDs (with its seed) and
// the last listing's IDs by index, which its goroutine alone touched; its
// listCalls, when every call of its last listing answered; and its
// semaphore, when every slot is back. The Report keeps none of them, and
// no goroutine the Run leaves behind (a Preserve abandoned, a listing
// call that never answered) can reach one: such a Run leaves what it
// still holds. Sets of IDs and listings of more than spareIDs are not
// kept: a large node's would hold their memory between drains. Four of a
// Run of 10's 22 allocations (docs/preserve.md, "stop 58").
type runSpare struct {
	slots   []uint64
	seed    maphash.Seed
	lastIDs []int32
	calls   *listCalls
	sem     *semaphore.Weighted
}

// spareIDs is the most IDs a runSpare's table and listing are kept for.
const spareIDs = 4096

// takeSpare takes what the Run before left (runSpare).
func (r *run) takeSpare() {
	p := r.p
	p.spareMu.Lock()
	s := p.spare
	p.spare = runSpare{}
	p.spareMu.Unlock()
	if s.slots != nil {
		r.seen.slots, r.seen.seed = s.slots[:0], s.seed
	}
	r.lastIDs, r.calls, r.sem = s.lastIDs, s.calls, s.sem
}

// leaveSpare leaves to the next Run what this one no longer uses and no
// goroutine it started can reach (runSpare). It is called as Run returns.
func (r *run) leaveSpare() {
	var s runSpare
	if cap(r.seen.slots) <= tableSize(spareIDs) && r.seen.slots != nil {
		s.slots, s.seed = r.seen.slots[:0], r.seen.seed
	}
	if cap(r.lastIDs) <= spareIDs {
		s.lastIDs = r.lastIDs[:0]
	}
	s.calls = r.calls // nil while a call may still answer into it (listOnce)
	// Every slot back: no worker is left to give one back, nor a
	// Preserve abandoned, whose slot its worker keeps.
	if n := int64(r.cfg.maxLimit); r.sem.TryAcquire(n) {
		r.sem.Release(n)
		s.sem = r.sem
	}
	p := r.p
	p.spareMu.Lock()
	p.spare = s
	p.spareMu.Unlock()
}

func chain(a, b context.CancelFunc) context.CancelFunc {
	if a == nil {
		return b
	}
	return func() { b(); a() }
}

// phaseOver reports whether no preserve may start any more.
func (r *run) phaseOver() bool {
	if r.phaseEnd().IsZero() {
		return r.ctx.Err() != nil // no clock to read
	}
	return r.phaseOverAt(time.Now())
}

func (r *run) phaseOverAt(now time.Time) bool {
	if r.ctx.Err() != nil {
		return true
	}
	end := r.phaseEnd()
	return !end.IsZero() && !now.Before(end)
}

// pass makes one listing pass and returns how many new sandboxes it found,
// how many sandboxes it found listed again after their preserve, and,
// when its listing failed after it listed some sandboxes with an error
// worth retrying, that error: the listing is to be made again. before is
// the error of the pass before that made this one list again, if any.
func (r *run) pass(n int, before error) (found, again int, retry error) {
	if n > 1 && r.phaseOver() {
		return 0, 0, nil
	}
	list, err := r.list()
	r.rep.Passes = n
	if err != nil {
		if before != nil && len(list) == 0 && (errors.Is(err, errListAbandoned) || r.ctx.Err() != nil) {
			err = cutAfter(err, before, "listing")
		}
		r.rep.ListErr = err.Error()
		if len(list) == 0 {
			r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: listing sandboxes failed",
				slog.Int("pass", n), slog.String("error", err.Error()))
			return 0, 0, nil
		}
		// The sandboxes listed before the error are known to be there:
		// preserved like any listed ones, as an io.Reader's caller
		// processes the bytes read before its error. The node may have
		// more, so the listing still failed.
		r.partly = true
		if !r.permanent(err) {
			retry = err
		}
		r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: listing sandboxes failed after it listed some; preserving those, the node may have more",
			slog.Int("pass", n), slog.Int("listed", len(list)), slog.String("error", err.Error()))
	} else {
		r.listed = true
	}
	tasks := r.admit(list, n)
	if len(tasks.all) == 0 {
		return 0, 0, retry
	}
	if tasks.again > 0 {
		r.cfg.log.LogAttrs(r.ctx, slog.LevelWarn, "pause: sandboxes listed again after their preserve (resumed, or the listing lags); preserving them again",
			slog.Int("pass", n), slog.Int("again", tasks.again), slog.String("first", tasks.entry(&tasks.all[tasks.firstAgain()]).ID))
	}
	order, st := r.order(&tasks)
	if r.cfg.log.Enabled(r.ctx, slog.LevelInfo) {
		r.cfg.log.LogAttrs(r.ctx, slog.LevelInfo, "pause: pass started",
			slog.Int("pass", n), slog.Int("new", len(tasks.all)-tasks.again), slog.Int("again", tasks.again), slog.String("order", order.String()),
			slog.Int("limit", r.limit), slog.String("time_left", fmtLeft(r.phaseEnd())))
	}
	ps := r.newPass(tasks)
	if r.adaptive && r.cfg.order == OrderAuto && order == OrderLongestFirst && st.samePriority {
		ps.back, ps.units = true, st.units
	}
	r.dispatch(ps)
	r.await(ps)
	ps.close()
	r.settle(&tasks)
	return len(tasks.all) - tasks.again, tasks.again, retry
}

// A taskList is the tasks of a pass, the order they start in, and what
// their indices refer to.
type taskList struct {
	all []task // in the order first listed
	// order is the start order, as indices into all; nil, the usual case
	// when nothing is known of the sandboxes (FIFO) or all are alike,
	// means the order of all. Indices, not pointers: a large node's would
	// be 8 bytes a sandbox for the collector to scan, for a Run's life.
	order []int32

	// entries is the Report's entries as the pass's listing left them. A
	// later listing only adds entries past the pass's, and when that moves
	// the Report's entries to a larger array the pass is over: its
	// entries are final, and copied as they are. So a task's entry is at
	// its index here for as long as anything writes it.
	entries []Entry
	// sbs is the tasks' sandboxes, as all: copied from the listing, whose
	// slice is the Lister's to reuse once admit returns.
	sbs []Sandbox
	x   []*taskExtra // as all; nil unless tasks have a bound or a span
	// again is how many of the tasks are of sandboxes an earlier pass
	// listed, listed again after their preserve (see listedAgain).
	again int
}

// firstAgain returns the index in all of the first task of a sandbox
// listed again, or 0 if none.
func (l *taskList) firstAgain() int {
	for i := range l.all {
		if l.entries[l.all[i].ei].Relisted > 0 {
			return i
		}
	}
	return 0
}

// entry returns t's Report entry.
func (l *taskList) entry(t *task) *Entry { return &l.entries[t.ei] }

// sandbox returns t's sandbox.
func (l *taskList) sandbox(t *task) Sandbox { return l.sbs[t.k] }

// extra returns t's span and bound, or nil.
func (l *taskList) extra(t *task) *taskExtra {
	if l.x == nil {
		return nil
	}
	return l.x[t.k]
}

// at returns the i-th task to start.
func (l *taskList) at(i int) *task {
	if l.order == nil {
		return &l.all[i]
	}
	return &l.all[l.order[i]]
}

// ordered returns the start order, made the order of all if there was none.
func (l *taskList) ordered() []int32 {
	if l.order == nil {
		l.order = make([]int32, len(l.all))
		for i := range l.order {
			l.order[i] = int32(i)
		}
	}
	return l.order
}

// admit makes a task and a Report entry for every sandbox of list that this
// Run has not seen, in list order, and a task on its entry for every one
// an earlier pass listed that is listed again after its preserve
// (listedAgain). A flawed element of the listing (a nil
// Sandbox, an empty ID, an ID listed twice, an ID, Priority or
// EstimatedPreserve that panics) gets a Failed entry saying why and no
// task: the Report accounts for every element, and the flaw is the
// Lister's to fix. A later listing with the same flaws (of the same kind,
// and of the same ID where the element has one) adds entries only for
// flaws more numerous than in any listing before.
//
// The cost per element is what a large node pays twice (the first listing
// and the one that finds nothing new), so the common cases take no more
// than one operation on the set of IDs seen: an element whose ID is the
// one the listing before had at the same index was seen (the Lister
// returned the same order), and in the first listing one insert tells a
// duplicate.
func (r *run) admit(list []Sandbox, pass int) taskList {
	first := r.seen.len() == 0
	if first { // nearly every sandbox is new
		r.seen.reset(len(list))
		r.rep.Entries = growEntries(r.rep.Entries, len(list))
	}
	prev := r.lastIDs
	switch {
	case prev == nil:
		prev = make([]int32, len(list))
	case len(prev) < len(list):
		prev = append(prev, make([]int32, len(list)-len(prev))...)
	}
	// The tasks, allocated at the first new sandbox, each with the index of
	// its entry, and their sandboxes.
	var backing []task
	var sbs []Sandbox
	var flaws map[string]int // this listing's flaws by kind
	var again map[int32]bool // entries listed again, to preserve again (rare: a resume)
	var met entryMarks       // entries of earlier passes this listing has had
	old := len(r.rep.Entries)
	var ids [identChunk]identity
	for i, sb := range list {
		k := i % identChunk
		if k == 0 {
			r.identify(list[i:min(i+identChunk, len(list))], pass, ids[:], first)
		}
		id, flaw := ids[k].id, ids[k].flaw
		var e Entry
		if flaw != "" {
			e = Entry{Pass: pass, Stack: ids[k].stack}
		}
		j := int32(-1) // the entry of id, when an earlier pass listed it
		dup := false   // an element before this one in the listing has id, new to the Run
		if flaw == "" && prev[i] > 0 && r.rep.Entries[prev[i]-1].ID == id {
			j = prev[i] - 1 // at the same index in the listing before: seen
		} else {
			prev[i] = 0 // set again below once id is in seen
			if flaw == "" && !first {
				if found, ok := r.seen.find(id, r.rep.Entries); ok {
					prev[i] = int32(found + 1)
					if r.rep.Entries[found].Pass != pass {
						j = int32(found)
					} else {
						dup = true
					}
				}
			}
		}
		if j >= 0 {
			if met.mark(j, old) {
				// Preserved again if it is listed again after its preserve.
				if r.listedAgain(j, pass, &again) {
					backing, sbs = appendTask(backing, sbs, j, sb, len(list)-i)
				}
				continue
			}
			// Its second element in this listing: a flaw, as a new ID's
			// second is (below). It may be another sandbox under the same
			// ID, which no preserve reaches.
			flaw, e = repeated(id), Entry{ID: id, Pass: pass}
		}
		slot := -1 // the index of the entry filled in place
		if flaw == "" {
			slot = r.newSlot()
			if flaw, e.Stack = fillEntry(&r.rep.Entries[slot], sb, id, pass); flaw != "" {
				e = Entry{ID: id, Pass: pass, Stack: e.Stack}
			}
		}
		if flaw == "" && !dup {
			var j int
			j, dup = r.seen.insert(id, ids[k].hash, slot, r.rep.Entries) // dup only in the first listing: else looked up above
			prev[i] = int32(j + 1)
		}
		if dup && flaw == "" {
			flaw = repeated(id)
			e = r.rep.Entries[slot]
		}
		if flaw != "" && slot >= 0 {
			r.dropSlot(slot)
		}
		if flaw != "" {
			if flaws == nil {
				flaws = make(map[string]int)
			}
			// A flaw is told from an earlier listing's by its kind and the
			// ID of its element, when it has one: a panic's value alone is
			// the same for every sandbox whose Priority panics the same way.
			key := flaw
			if e.ID != "" {
				key = e.ID + "\x00" + flaw
			}
			if flaws[key]++; flaws[key] <= r.flaws[key] {
				continue // an earlier listing reported it
			}
			if r.flaws == nil {
				r.flaws = make(map[string]int)
			}
			r.flaws[key] = flaws[key]
			e.Outcome, e.End = Failed, time.Now()
			e.Error = fmt.Sprintf("pause: listing %d, element %d: %s; not preserved", pass, i, flaw)
			r.rep.Entries = append(r.rep.Entries, e)
			r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: flawed listing element",
				slog.Int("pass", pass), slog.Int("index", i), slog.String("error", e.Error))
			continue
		}
		backing, sbs = appendTask(backing, sbs, int32(slot), sb, len(list)-i)
	}
	r.lastIDs = prev[:len(list)]
	if len(backing) == 0 {
		return taskList{}
	}
	if r.cfg.progress > 0 {
		r.left.Add(int64(len(backing)))
	}
	tl := taskList{all: backing, entries: r.rep.Entries, sbs: sbs, again: len(again)}
	if r.traced || r.cfg.timeout > 0 {
		tl.x = make([]*taskExtra, len(backing))
	}
	return tl
}

// repeated is the flaw of a listing element whose ID an element before it
// in the listing has.
func repeated(id string) string { return fmt.Sprintf("ID %q more than once in the listing", id) }

// entryMarks marks entries of the Report, by index: the entries of earlier
// passes a listing has had so far, so that a second element with one of
// their IDs is a flaw. It is made at its first mark, for the n entries
// before the listing: a listing of only new sandboxes, the usual one,
// costs nothing, and a large node's listing of the same sandboxes again
// one bit per entry.
type entryMarks []uint64

// mark marks entry j, one of n, and reports whether it was not marked.
func (m *entryMarks) mark(j int32, n int) bool {
	if *m == nil {
		*m = make(entryMarks, (n+63)/64)
	}
	w, bit := &(*m)[j/64], uint64(1)<<(j%64)
	if *w&bit != 0 {
		return false
	}
	*w |= bit
	return true
}

// appendTask appends a task for the entry at index ei and its sandbox sb,
// allocating room for left more at the first.
func appendTask(backing []task, sbs []Sandbox, ei int32, sb Sandbox, left int) ([]task, []Sandbox) {
	if backing == nil {
		backing = make([]task, 0, left)
		sbs = make([]Sandbox, 0, left)
	}
	return append(backing, task{ei: ei, k: int32(len(backing))}), append(sbs, sb)
}

// listedAgain reports whether the sandbox of entry j, which an earlier
// pass listed, must be preserved again: it is listed again after it was
// preserved or vanished, so it runs again (a resume racing the drain) or
// the listing lags the pause. A Lister lists only what still needs
// preserving; an entry with another outcome (failed, timed out) is
// already counted lost, and one listed twice in a listing is preserved
// once (admit makes its second element a flaw and does not ask). It
// records the entry in again, and counts the relisting in the entry.
func (r *run) listedAgain(j int32, pass int, again *map[int32]bool) bool {
	e := &r.rep.Entries[j]
	if e.Outcome != Preserved && e.Outcome != Vanished || (*again)[j] {
		return false
	}
	if *again == nil {
		*again = make(map[int32]bool)
	}
	(*again)[j] = true
	e.Relisted++
	// Start and Duration are its last preserve's, and this one has not
	// started: one that never does (the phase deadline) has neither.
	e.Start, e.Duration = time.Time{}, 0
	if r.cfg.progress > 0 { // counted again when it settles
		r.finished.Add(-1)
		if e.Outcome == Preserved {
			r.preservedN.Add(-1)
		}
	}
	if r.cfg.log.Enabled(r.ctx, slog.LevelDebug) { // the pass logs their number; a lagging listing may hold every sandbox
		r.cfg.log.LogAttrs(r.ctx, slog.LevelDebug, "pause: sandbox listed again after its preserve; preserving it again",
			slog.String("sandbox", e.ID), slog.String("outcome", string(e.Outcome)), slog.Int("pass", pass), slog.Int("relisted", e.Relisted))
	}
	return true
}

// identChunk is how many elements of a listing identify reads at once.
const identChunk = 32

// An identity is the ID of an element of a listing and the hash the set
// of IDs seen files it under, or what is wrong with the element.
type identity struct {
	id, flaw, stack string
	hash            uint64
}

// identify reads the IDs of chunk, a run of a listing's elements, into
// ids. In the first listing, where every ID goes into the set of IDs seen,
// it also hashes them and loads the slots they go to, all at once: a
// large node's set is larger than a core's cache, and the cache misses of
// a chunk then overlap instead of coming one after the other.
func (r *run) identify(chunk []Sandbox, pass int, ids []identity, first bool) {
	for j, sb := range chunk {
		ids[j] = identity{}
		ids[j].id, ids[j].flaw, ids[j].stack = ident(sb)
	}
	if first {
		r.seen.prefetch(ids[:len(chunk)])
	}
}

// ident returns the ID of element sb of a listing, or what is wrong with
// it: nil, an empty ID, or an ID method that panicked (with its stack).
// Its recover runs only when ID did not return (see returned).
func ident(sb Sandbox) (id, flaw, stack string) {
	if sb == nil {
		return "", "nil Sandbox", ""
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			id, flaw, stack = "", fmt.Sprintf("panicked: %v", v), string(debug.Stack())
		}
	}()
	id = sb.ID()
	returned = true
	if id == "" {
		return "", "empty ID", ""
	}
	return id, "", ""
}

// fillEntry fills e, a zero entry, with the account of a sandbox with a
// valid ID, or says that one of its methods panicked, with the stack.
//
// returned: a deferred function calls recover only when the call it
// guards did not return, here and in ident, call and callList. recover's
// own frame (the runtime's, with the unwinder it checks its caller with)
// is larger than what is left of a goroutine's first 2 KiB under a
// worker's frames, and calling it on every preserve grew every worker's
// stack (runtime.newstack, copystack: about a tenth of a Run of 10
// no-ops' CPU, docs/preserve.md) for the rare panic it catches. A panic
// or a runtime.Goexit still finds returned false, and recover then does
// what it did.
func fillEntry(e *Entry, sb Sandbox, id string, pass int) (flaw, stack string) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			flaw, stack = fmt.Sprintf("panicked: %v", v), string(debug.Stack())
		}
	}()
	newEntry(e, sb, id, pass)
	returned = true
	return "", ""
}

// newSlot appends a zero entry to the Report and returns its index. The
// entries past the length are zero (made so, or cleared by dropSlot), so
// within the capacity no copy is made: an Entry appended as a value is
// copied with a write barrier while the collector runs.
func (r *run) newSlot() int {
	n := len(r.rep.Entries)
	if n < cap(r.rep.Entries) {
		r.rep.Entries = r.rep.Entries[:n+1]
	} else {
		r.rep.Entries = append(r.rep.Entries, Entry{})
	}
	return n
}

// dropSlot removes the last entry, slot, which newSlot appended.
func (r *run) dropSlot(slot int) {
	r.rep.Entries[slot] = Entry{}
	r.rep.Entries = r.rep.Entries[:slot]
}

func growEntries(e []Entry, n int) []Entry {
	if cap(e)-len(e) >= n {
		return e
	}
	out := make([]Entry, len(e), len(e)+n)
	copy(out, e)
	return out
}

// settle writes the Report entry of every task of a pass: the outcome of
// the ones that returned, TimedOut for the ones abandoned still running,
// NotStarted for the ones whose turn never came.
func (r *run) settle(tasks *taskList) {
	var now time.Time // read at the first task not settled: usually none is
	for i := range tasks.all {
		t := &tasks.all[i]
		e := tasks.entry(t)
		res, changed := t.final(e, &now)
		if !changed {
			continue
		}
		switch {
		case res.outcome != NotStarted: // abandoned while running
			endSpan(tasks.extra(t), t, &res)
			r.p.tel.inflight.Add(r.ctx, -1)
			t.log(r, e, &res) // at Warn, as one abandoned at its SandboxTimeout
			r.recordAbandoned(t.ei, e, &res)
			continue
		case r.adaptive: // queued: never taken, or its worker gives it back (untaken) as it does not start it
			r.mu.Lock() // a worker taking a task at the hard deadline may hold it
			r.queue.remove(r.units(e))
			r.mu.Unlock()
		}
		r.record(e, &res)
	}
}

// record accounts for a settled task in metrics and progress; the task's
// goroutine calls it for the tasks that returned, settle for the others.
func (r *run) record(e *Entry, res *result) {
	if r.cfg.progress > 0 {
		r.count(res.outcome)
	}
	r.p.tel.outcome(r.ctx, e, res)
}

// recordAbandoned accounts for the task of entry ei, abandoned while it
// ran (res): in progress at once, in the metrics when the Report is made,
// with the outcome the Report gives it (finish). Its Preserve may return
// before the Report, which then says how it returned (keepLate): counted
// timed_out as it was abandoned, a sandbox the Report says preserved was
// timed_out in the metrics for good, a counter not going down. One
// abandoned as the Report is made is counted at once, as the Report says.
func (r *run) recordAbandoned(ei int32, e *Entry, res *result) {
	if r.cfg.progress > 0 {
		r.count(res.outcome)
	}
	r.hardMu.Lock()
	if !r.reported {
		if r.late == nil {
			r.late = new(abandonments)
		}
		r.late.entries = append(r.late.entries, ei)
		r.hardMu.Unlock()
		return
	}
	r.hardMu.Unlock()
	r.p.tel.outcome(r.ctx, e, res)
}

// countAbandoned counts in the metrics the entries of the tasks abandoned
// while running (recordAbandoned), by the outcome the Report gives them.
func (r *run) countAbandoned(abandoned []int32) {
	for _, ei := range abandoned {
		e := &r.rep.Entries[ei]
		r.p.tel.outcome(r.ctx, e, &result{outcome: e.Outcome, end: e.End})
	}
}

// count adds a settled sandbox to the counts of the progress line.
func (r *run) count(o Outcome) {
	r.left.Add(-1)
	r.finished.Add(1)
	switch o {
	case Preserved:
		r.preservedN.Add(1)
	case Failed, TimedOut:
		r.failedN.Add(1)
	}
}

func (r *run) finish() *Report {
	rep := r.rep
	rep.End = time.Now()
	r.hardMu.Lock()
	if _, moved := r.tight.Get(); moved {
		rep.Hard = r.hard
		rep.Deadline = r.phaseEnd() // the phase ended there
	}
	r.reported = true
	late := r.late
	r.hardMu.Unlock()
	if late != nil {
		r.settleLate(late.returns)
		r.countAbandoned(late.entries)
	}
	r.mu.Lock() // a worker settling as await gave up at the hard deadline may still move it
	rep.Limit = r.limit
	if r.adaptive {
		rep.LearnedLimit = r.climb.learned()
		if t := r.climb.target; t > 0 {
			// No epoch decided (too few sandboxes, a deadline or a cancel before
			// one): the learned level was not tested, and the next Run tests it.
			r.p.target.CompareAndSwap(0, int64(t))
		}
	}
	r.mu.Unlock()
	rep.Unknown = !r.listed && !r.partly
	rep.Incomplete = !r.listed && r.partly
	var counts [len(outcomes)]int
	for i := range rep.Entries {
		counts[outcomeIndex(rep.Entries[i].Outcome)]++
	}
	for i, n := range counts {
		if n > 0 {
			rep.Counts[outcomes[i]] = n
		}
	}
	if r.traced { // the attributes cost allocations a span that records nothing would drop
		for _, o := range outcomes {
			r.span.SetAttributes(attribute.Int("drainkit.pause."+string(o), rep.Counts[o]))
		}
		r.span.SetAttributes(attribute.Int("drainkit.pause.passes", rep.Passes), attribute.Int("drainkit.pause.final_limit", rep.Limit))
		if err := rep.Err(); err != nil {
			r.span.SetStatus(codes.Error, err.Error())
		}
	}
	if rep.Unknown {
		r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: no listing succeeded; the node's sandboxes are unknown",
			slog.Int("passes", rep.Passes), slog.String("last_error", rep.ListErr))
	}
	if rep.Incomplete {
		r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: no listing was complete; the node may have sandboxes the Report does not account for",
			slog.Int("passes", rep.Passes), slog.Int("listed", len(rep.Entries)), slog.String("last_error", rep.ListErr))
	}
	if r.cfg.log.Enabled(r.ctx, slog.LevelInfo) { // its counts are five lookups in Counts: only for a line written
		r.cfg.log.LogAttrs(r.ctx, slog.LevelInfo, "pause: run finished",
			slog.Int("preserved", rep.Counts[Preserved]), slog.Int("lost", rep.Lost()),
			slog.Int("vanished", rep.Counts[Vanished]), slog.Int("passes", rep.Passes),
			slog.Duration("took", rep.End.Sub(rep.Start)), slog.Int("limit", rep.Limit))
	}
	return rep
}

// abandonments is what the Report makes of the preserves abandoned while
// running: the returns that came before it, and the entries whose outcome
// the metrics count when it is made.
type abandonments struct {
	returns []lateReturn // keepLate
	entries []int32      // recordAbandoned
}

// A lateReturn is how the Preserve of a task abandoned while it ran
// ended, when it returned before the Report was made: ei is the task's
// entry.
type lateReturn struct {
	ei  int32
	res result
}

// keepLate keeps res, how the Preserve of t ended, for the Report, if
// the Run has not made it yet: t was abandoned while it ran (at the end
// of its pass, or past its SandboxTimeout), and then returned. A Preserve
// that returned before Run did is not one Run left running: what the
// Report says of its sandbox is what it returned (a sandbox preserved, not
// lost). Only the Report waits for it; Run does not. It reports false when
// the Report was made already.
func (r *run) keepLate(t *task, res *result) bool {
	r.hardMu.Lock()
	defer r.hardMu.Unlock()
	if r.reported {
		return false
	}
	if r.late == nil {
		r.late = new(abandonments)
	}
	r.late.returns = append(r.late.returns, lateReturn{t.ei, *res})
	return true
}

// afterReport logs at Warn how the Preserve of sb, abandoned while it
// ran, ended after Run made its Report, which is returned once and says
// timed_out: without the line, nothing told a user that the sandbox was
// preserved after all (docs/faults.md row 2681). The ID is the sandbox's
// own: the Report's entry is its caller's now.
func (r *run) afterReport(sb Sandbox, res *result) {
	id, flaw, _ := ident(sb) // user code, called again: a panic is recovered
	if flaw != "" {
		id = "(ID " + flaw + ")"
	}
	attrs := []slog.Attr{slog.String("sandbox", id), slog.String("outcome", string(res.outcome)),
		slog.String("report_says", string(TimedOut))}
	if res.err != nil {
		attrs = append(attrs, slog.String("error", res.err.Error()))
	}
	r.cfg.log.LogAttrs(r.ctx, slog.LevelWarn, "pause: sandbox abandoned returned after the Report: "+string(res.outcome)+
		" (the Report says timed_out)", attrs...)
}

// settleLate writes the returns of preserves abandoned that came before
// the Report (keepLate) into their entries, each in place of the
// abandonment, and logs each at Warn, as the abandonment was. The
// attempts stay: a task abandoned starts no attempt (its context ended).
// The metrics count it as the Report now says (countAbandoned).
func (r *run) settleLate(late []lateReturn) {
	for i := range late {
		l := &late[i]
		e := &r.rep.Entries[l.ei]
		e.end(&l.res)
		r.observe(e, &l.res)
		attrs := []slog.Attr{slog.String("sandbox", e.ID), slog.String("outcome", string(e.Outcome)), slog.Duration("took", e.Duration)}
		if e.Error != "" {
			attrs = append(attrs, slog.String("error", e.Error))
		}
		r.cfg.log.LogAttrs(r.ctx, slog.LevelWarn, "pause: sandbox abandoned returned before the Report: "+string(e.Outcome), attrs...)
	}
}

func (r *run) close() {
	if r.rep.End.IsZero() { // finish has not run: Run does not return
		r.endedUnreported()
	}
	if r.progress != nil {
		r.progressMu.Lock()
		r.progressDone = true
		r.progress.Stop()
		r.progressMu.Unlock()
	}
	r.hardMu.Lock()
	if r.cutAt != nil {
		r.cutAt.Stop()
	}
	cut := r.cut
	r.hardMu.Unlock()
	if cut != nil {
		cut()
	}
	if r.span != nil { // nil when the goroutine ended in the TracerProvider's Start
		r.span.End()
	}
	r.leaveSpare()
}

// endedUnreported leaves the Preserver with no Run in progress when the
// Run's goroutine ends before its Report: code of the user's that Run
// calls on it (a Sandbox's ID, Priority, EstimatedPreserve or Size, the
// log handler, the TracerProvider) called runtime.Goexit (t.FailNow in a
// test's Sandbox), which nothing stops, or panicked. Run cannot return to
// a caller whose goroutine is ending; close then ends what it started, as
// at its end (the phase and the preserves' contexts), and this says so at
// Error with the stack. Left the Run in progress, a Tighten until the next
// Run went to a Run that would never end, and said it moved it
// (docs/faults.md row 3722).
func (r *run) endedUnreported() {
	r.p.cur.CompareAndSwap(r, nil)
	r.hardMu.Lock()
	r.reported = true // a Tighten that loaded the run before moves nothing
	r.hardMu.Unlock()
	ctx := r.ctx
	if ctx == nil { // ended in the TracerProvider's Start
		ctx = context.Background()
	}
	r.cfg.log.LogAttrs(ctx, slog.LevelError, "pause: Run's goroutine ended before its Report (runtime.Goexit, or a panic, in code of the user's Run calls: a Sandbox's ID, Priority, EstimatedPreserve or Size, the log handler, the TracerProvider); no Report, and the preserves running are cut",
		slog.String("stack", string(debug.Stack())))
}

// startProgress logs a progress line every progress interval until close.
// A timer, not a goroutine: a Run shorter than the interval, the common
// case on a small node, pays for nothing but arming it.
func (r *run) startProgress() {
	every := r.cfg.progress
	if every <= 0 {
		return
	}
	// The timer is assigned under progressMu, which its callback takes
	// before it reads r.progress: a first tick cannot race the assignment.
	r.progressMu.Lock()
	defer r.progressMu.Unlock()
	r.progress = time.AfterFunc(every, func() {
		r.progressMu.Lock()
		defer r.progressMu.Unlock()
		if r.progressDone {
			return
		}
		r.logProgress(time.Now())
		r.progress.Reset(every)
	})
}

// logProgress logs the line an operator reads during a long preserve phase:
// "pause: progress: preserved 120/200, 3 failed, 41s to the preserve
// deadline", with the same counts as attributes. The total is what the
// passes listed so far. While a listing is in progress the line says how
// long it has been waited for: before any sandbox was listed, in place of
// the counts, which would read as a node with none.
func (r *run) logProgress(now time.Time) {
	done, left := r.finished.Load(), r.left.Load()
	preserved, failed := int64(r.preservedN.Load()), int64(r.failedN.Load())
	counts := fmt.Sprintf("preserved %d/%d, %d failed, ", preserved, done+left, failed)
	attrs := []slog.Attr{slog.Int64("preserved", preserved), slog.Int64("failed", failed),
		slog.Int64("done", done), slog.Int64("left", left),
		slog.String("time_left", fmtLeft(r.phaseEnd())), slog.Int64("limit", r.p.limit.Load())}
	if retrying := r.retrying.Load(); retrying > 0 {
		// Retried while a retry fits before the deadline, they are neither
		// preserved nor failed for as long: the line says why nothing moves.
		counts += fmt.Sprintf("%d retrying after a failure, ", retrying)
		attrs = append(attrs, slog.Int("retrying", int(retrying)))
	}
	if at, fails, ok := r.listingState(); ok {
		waited := now.Sub(at)
		if done+left == 0 {
			counts = ""
		}
		counts += listingLine(waited, fails, done+left == 0) + ", "
		attrs = append(attrs, slog.Duration("listing_for", waited), slog.Int("listing_failed", fails))
	}
	r.cfg.log.LogAttrs(r.ctx, slog.LevelInfo, "pause: progress: "+counts+r.untilDeadline(now), attrs...)
}

// listingLine says how long the listing in progress has been waited for
// and how many of its attempts failed; first says no sandbox is listed
// yet. An attempt that failed answered (with its error): with one, the
// words say nothing is listed yet, not that no answer came.
func listingLine(waited time.Duration, fails int, first bool) string {
	what := "listing again: no answer yet"
	switch {
	case first && fails > 0:
		what = "listing: no sandboxes listed yet"
	case first:
		what = "listing: no answer yet"
	case fails > 0:
		what = "listing again: nothing listed yet"
	}
	if fails > 0 {
		return fmt.Sprintf("%s after %s, %d attempts failed", what, roughly(waited), fails)
	}
	return what + " after " + roughly(waited)
}

// The listing word holds the listing in progress: its start, in
// milliseconds from the Run's plus one, above listFailBits bits that count
// its failed attempts (to listFailMax). One word: the run is at the edge
// of its size class (size_internal_test.go).
const (
	listFailBits = 16
	listFailMax  = 1<<listFailBits - 1
)

// listingBegan marks a listing begun now, with no attempt failed. Only
// list, on Run's goroutine, writes the word.
func (r *run) listingBegan() {
	ms := int64(time.Since(r.rep.Start) / time.Millisecond)
	r.listing.Store((ms + 1) << listFailBits)
}

// listingFailed counts a failed attempt of the listing in progress.
func (r *run) listingFailed() {
	if v := r.listing.Load(); v != 0 && v&listFailMax < listFailMax {
		r.listing.Add(1)
	}
}

// listingState returns when the listing in progress began and how many of
// its attempts failed; ok is false when none is in progress.
func (r *run) listingState() (at time.Time, fails int, ok bool) {
	v := r.listing.Load()
	if v == 0 {
		return time.Time{}, 0, false
	}
	at = r.rep.Start.Add(time.Duration(v>>listFailBits-1) * time.Millisecond)
	return at, int(v & listFailMax), true
}

// untilDeadline says how far the phase deadline is (a hard deadline
// Tighten moved before it ends the phase there), or, once it passed, the
// hard deadline in-flight preserves run to.
func (r *run) untilDeadline(now time.Time) string {
	hard, phase := r.hardline(), r.phaseEnd()
	switch {
	case phase.IsZero():
		return "no deadline"
	case now.Before(phase):
		return roughly(phase.Sub(now)) + " to the preserve deadline"
	}
	if now.Before(hard) {
		return "preserve deadline passed, in-flight preserves have " + roughly(hard.Sub(now)) + " to the hard deadline"
	}
	return "deadline passed"
}

// roughly rounds d for a person: whole seconds from 10 s, tenths below.
func roughly(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
