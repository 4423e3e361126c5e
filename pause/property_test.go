package pause_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/drainkit/drainkit/pause"
)

// propertySeeds is how many generated scenarios TestRunAccountsForEverySandboxWhateverHappens
// runs; each one is a Run of up to 24 sandboxes in virtual time.
const propertySeeds = 1000

// TestRunAccountsForEverySandboxWhateverHappens drives a real Preserver
// through generated scenarios, each from a seed (reproduce one with
// -run 'TestRunAccountsForEverySandboxWhateverHappens/seed=N'), in virtual
// time (testing/synctest), and checks what the package documents of every
// Run, whatever happens in it:
//
//   - Sandboxes: a Preserve that succeeds, fails transiently (retried) or
//     permanently, returns ErrGone, panics, ignores its context until long
//     after the hard deadline, each after a random virtual time; one that
//     behaves differently from one call to the next (a sandbox preserved
//     again after a relisting). Plain, Estimated, Sized and Prioritized
//     sandboxes mixed, and ones whose Priority panics.
//   - A Lister scripted per call: sandboxes new, or listed again after
//     their preserve, the same ID twice in one listing, a transient,
//     permanent or partial failure (sandboxes with an error), a panic, a
//     slow answer that honours its context or ignores it, an answer that
//     comes as the Run is forced (the call cancels Run's context as it
//     answers).
//   - Config: a fixed limit, the adaptive one (default, with a ceiling,
//     from a learned Limit), CancelAtDeadline, every Order, a
//     SandboxTimeout, a Permanent classifier that panics on transient
//     errors, a logger with progress lines, recording tracer and meter
//     providers.
//   - A Tighten of the hard deadline (to a time ahead, or already past)
//     and a cancel of Run's context, each at a random time; a second Run of the Preserver after the first.
//
// The invariants (doc.go's Guarantees, Run's, Report's and Entry's docs):
//
//  1. One entry per sandbox ID any listing gave the Run (the ones a
//     listing returned before the phase ended surely, ones returned as
//     it ended possibly), and none other, in the order first listed;
//     flawed elements (nil, an empty ID, an ID repeated in one listing,
//     whichever pass first listed it, a Priority that panics) have Failed
//     entries of their own, as many of each flaw (of each ID) as the most
//     one listing had.
//  2. Counts holds the number of entries of each outcome, and sums to
//     the entries; Lost is Failed + TimedOut + NotStarted.
//  3. Err is nil iff a listing succeeded and nothing was lost; Unknown
//     when no listing succeeded nor gave sandboxes, Incomplete when none
//     succeeded and a failed one gave some, never both.
//  4. Each entry's Outcome is what its sandbox's last Preserve did:
//     Preserved (nil, or ErrGone when preserved again), Vanished (ErrGone),
//     Failed (an error not of the context, a panic, with its stack),
//     TimedOut (running at its deadline, or ended by its context),
//     NotStarted (never called); Attempts is the number of calls made.
//  5. Start, End within the Run, Duration = End - Start, no Start iff
//     NotStarted; Start the first call (of a sandbox not listed again),
//     End the last call's return (or later, for a transient error whose
//     retry did not fit).
//  6. No Preserve starts after the phase deadline (as a Tighten moved
//     it), after Run's context is cancelled, after Run returned, or past
//     its context's Deadline, which is the hard deadline (as a Tighten
//     before the call moved it), or the phase deadline if earlier with
//     CancelAtDeadline, or the SandboxTimeout's end if earlier still.
//  7. Run returns by the later of its deadlines (or by the hard deadline
//     it was tightened to) plus the 20 ms it waits for preserves that
//     end with their context; then only Preserves that ignore their
//     context still run, and each is reported TimedOut; every other
//     goroutine of the Run ends (synctest would report it blocked).
//  8. No more preserves at once than the limit fixed, or than MaxLimit
//     when it adapts, apart from ones abandoned a second past their
//     SandboxTimeout; Preserver.Limit, read by every Preserve, and
//     Report.Limit stay in [1, MaxLimit], Report.Limit is a fixed Limit;
//     after the Run Preserver.Limit is the fixed limit, Report.Limit, 1
//     while no preserve was measured (no Config.Limit), or a learned
//     Config.Limit below Report.Limit not yet tested; LearnedLimit is
//     zero for a fixed limit and otherwise zero or in [1, MaxLimit].
//  9. Report.Deadline is the phase deadline (the tightened hard deadline
//     when that is earlier), Report.Hard the hard deadline when later
//     than it (a hard deadline given before it counts as none), the
//     tightened one after a Tighten that moved it; Relisted never exceeds the passes after the
//     first, and Passes the listings made.
//  10. A pass starts its new sandboxes by priority, and with a fixed limit
//     FIFO in listing order or longest first by estimate, as Order says.
//  11. Telemetry, when it records: an ended pause.Preserve span per
//     preserve started, the Run span's counts as the Report's,
//     drainkit.pause.sandboxes counting each sandbox and each relisting,
//     drainkit.pause.preserve.active back to 0 when Run returns.
//  12. The Estimator is fed each sandbox's first preserve that succeeded,
//     and no preserve again.
func TestRunAccountsForEverySandboxWhateverHappens(t *testing.T) {
	for seed := range uint64(propertySeeds) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { checkScenario(t, newScenario(seed)) })
		})
	}
}

// A scenario is one generated Run: its sandboxes, the Lister's script, the
// Config and what happens to the deadlines.
type scenario struct {
	seed      uint64
	sbs       map[string]*propSandbox
	listings  []propListing
	cfg       pause.Config
	phase     time.Duration // from the Run's start
	hard      time.Duration // 0: none (the phase deadline)
	tightenAt time.Duration // 0: no Tighten
	tightenTo time.Duration
	cancelAt  time.Duration // 0: no cancel
	runs      int           // Runs of one Preserver, one after the other (a preStop sweep, then SIGTERM's)
	traced    bool          // with a recording TracerProvider and a MeterProvider
	noPhase   bool          // Run's context has no deadline: hard is both
}

func (s *scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d runs, no phase deadline %v, limit %d max %d cancelAtDeadline %v order %v timeout %v classifier %v traced %v; phase %v hard %v tighten %v->%v cancel %v\n",
		s.seed, s.runs, s.noPhase, s.cfg.Limit, s.cfg.MaxLimit, s.cfg.CancelAtDeadline, s.cfg.Order, s.cfg.SandboxTimeout, s.cfg.Permanent != nil, s.traced,
		s.phase, s.hard, s.tightenAt, s.tightenTo, s.cancelAt)
	for i, l := range s.listings {
		fmt.Fprintf(&b, "  listing %d: %v err=%v delay=%v ignoresCtx=%v forces=%v\n", i+1, l.ids, l.kind, l.delay, l.ignoreCtx, l.forces)
	}
	for _, id := range slices.Sorted(maps.Keys(s.sbs)) {
		fmt.Fprintf(&b, "  %s: %v\n", id, s.sbs[id].acts)
	}
	return b.String()
}

// What a listing does.
type listKind int

const (
	listOK listKind = iota
	listTransient
	listPermanent
	listPartial // the sandboxes, and an error
	listPanic
)

func (k listKind) String() string {
	return [...]string{"ok", "transient", "permanent", "partial", "panic"}[k]
}

// Listing elements with a flaw other than a repeated ID.
const (
	nilElement = "<nil>"
	emptyID    = "<empty>"
	panicking  = "<panicking>" // and the ID
)

type propListing struct {
	ids       []string
	kind      listKind
	delay     time.Duration
	ignoreCtx bool
	forces    bool // cancels Run's context as it answers (drain's Force landing then)
}

// What one Preserve call does, after its delay.
type actKind int

const (
	actOK actKind = iota
	actTransient
	actPermanent
	actGone
	actPanic
	actHang // ignores its context until long after every deadline
)

type act struct {
	kind  actKind
	delay time.Duration
}

func (a act) String() string {
	return fmt.Sprintf("%s/%v", [...]string{"ok", "transient", "permanent", "gone", "panic", "hang"}[a.kind], a.delay)
}

// A propSandbox does its acts, one per call (the last one again once they
// are used up), and records its calls.
type propSandbox struct {
	id   string
	acts []act
	h    *harness
	est  time.Duration
	size int64
	prio int
	// panics: its Priority panics, so every element of it is a flaw.
	panics bool
}

type plainSB struct{ *propSandbox }
type estSB struct{ *propSandbox }
type sizedSB struct{ *propSandbox }
type prioSB struct{ *propSandbox }
type allSB struct{ *propSandbox }
type panicSB struct{ *propSandbox }

func (s *propSandbox) ID() string                         { return s.id }
func (s estSB) EstimatedPreserve() time.Duration          { return s.est }
func (s sizedSB) Size() int64                             { return s.size }
func (s prioSB) Priority() int                            { return s.prio }
func (s allSB) EstimatedPreserve() time.Duration          { return s.est }
func (s allSB) Size() int64                               { return s.size }
func (s allSB) Priority() int                             { return s.prio }
func (panicSB) Priority() int                             { panic("priority not ready") }
func (s *propSandbox) Preserve(ctx context.Context) error { return s.h.preserve(ctx, s) }

// sandbox returns s as a Sandbox of the kind its index picks.
func (s *propSandbox) sandbox(kind int) pause.Sandbox {
	if s.panics {
		return panicSB{s}
	}
	switch kind % 5 {
	case 1:
		return estSB{s}
	case 2:
		return sizedSB{s}
	case 3:
		return prioSB{s}
	case 4:
		return allSB{s}
	}
	return plainSB{s}
}

// A call is one Preserve call as the sandbox saw it.
type call struct {
	start, end time.Time
	act        act
	returned   bool
	err        error
	panicked   bool
	afterRun   bool            // started after Run returned
	limit      int             // Preserver.Limit when it started
	deadline   time.Time       // its context's Deadline when it started
	ctx        context.Context // one per task when it has a SandboxTimeout or a span
}

// A listCall is one List call as the Lister saw it.
type listCall struct {
	start, end time.Time
	listing    propListing
	returned   bool
	forced     bool // it cancelled Run's context as it answered, at end
}

// hedgedOut marks the listing calls, in the order they started, whose
// answer was not taken: the Preserver makes a second call beside one that
// has not answered in half the time left to the phase deadline, and takes
// the first answer of the two, but a failure that listed nothing while
// the other has not answered (failsEmpty): it waits for that one. A call
// started while the one before it had not returned, that one not itself a
// second call, is its pair; of a pair, the later answer (or none) is
// dropped, or the earlier when it failsEmpty and the other returned, and
// two answers at the same instant are a tie, either of them taken.
func hedgedOut(lists []listCall) (dropped, tie map[int]bool) {
	dropped, tie = map[int]bool{}, map[int]bool{}
	second := false // the call before was a second call
	for i := 1; i < len(lists); i++ {
		a, b := lists[i-1], lists[i]
		if second || a.returned && !b.start.Before(a.end) {
			second = false
			continue
		}
		second = true
		switch {
		case a.returned && b.returned && a.end.Equal(b.end):
			tie[i-1], tie[i] = true, true
		case !b.returned || a.returned && a.end.Before(b.end): // a answered first
			if failsEmpty(a) && b.returned {
				dropped[i-1] = true
			} else {
				dropped[i] = true
			}
		default: // b answered first
			if failsEmpty(b) && a.returned {
				dropped[i] = true
			} else {
				dropped[i-1] = true
			}
		}
	}
	return dropped, tie
}

// failsEmpty reports whether call l's answer is a failure that listed
// nothing: of a pair, it waits for the other call (hedgedOut).
func failsEmpty(l listCall) bool {
	return l.listing.kind != listOK && (l.listing.kind != listPartial || len(l.listing.ids) == 0)
}

// The harness records what the Preserver did to the scenario's sandboxes.
type harness struct {
	p     *pause.Preserver
	mu    sync.Mutex
	calls map[string][]*call
	lists []*listCall
	ran   atomic.Bool // Run returned
	// With s.traced, the spans and metrics the Runs recorded.
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
	// A Run of the Preserver measured a preserve (preserved at its first
	// attempt), surely (before the phase ended: settled, not abandoned).
	measured, surelyMeasured bool
	release                  chan struct{}
	s                        *scenario
	objs                     map[string]pause.Sandbox
	force                    context.CancelFunc // the Run's cancel, under mu: a listing that forces calls it
}

func (h *harness) preserve(ctx context.Context, s *propSandbox) error {
	h.mu.Lock()
	n := len(h.calls[s.id])
	a := s.acts[min(n, len(s.acts)-1)]
	c := &call{start: time.Now(), act: a, afterRun: h.ran.Load(), limit: h.p.Limit()}
	c.deadline, _ = ctx.Deadline()
	c.ctx = ctx
	h.calls[s.id] = append(h.calls[s.id], c)
	h.mu.Unlock()
	finish := func(err error) error {
		h.mu.Lock()
		c.end, c.returned, c.err = time.Now(), true, err
		h.mu.Unlock()
		return err
	}
	if a.kind == actHang {
		select {
		case <-h.release:
		case <-time.After(1000 * time.Hour):
		}
		return finish(errors.New("hung preserve returned"))
	}
	select {
	case <-ctx.Done():
		return finish(ctx.Err())
	case <-time.After(a.delay):
	}
	switch a.kind {
	case actTransient:
		return finish(errors.New("transient"))
	case actPermanent:
		return finish(backoff.Permanent(errors.New("permanent")))
	case actGone:
		return finish(fmt.Errorf("it left: %w", pause.ErrGone))
	case actPanic:
		h.mu.Lock()
		c.end, c.returned, c.panicked = time.Now(), true, true
		h.mu.Unlock()
		panic("preserve panicked")
	}
	return finish(nil)
}

func (h *harness) List(ctx context.Context) ([]pause.Sandbox, error) {
	h.mu.Lock()
	n := len(h.lists)
	var l propListing // past the script: nothing left to preserve
	if n < len(h.s.listings) {
		l = h.s.listings[n]
	}
	lc := &listCall{start: time.Now(), listing: l}
	h.lists = append(h.lists, lc)
	h.mu.Unlock()
	if l.delay > 0 {
		if l.ignoreCtx {
			time.Sleep(l.delay)
		} else {
			select {
			case <-ctx.Done():
				h.mu.Lock()
				lc.end, lc.returned, lc.listing = time.Now(), true, propListing{kind: listTransient}
				h.mu.Unlock()
				return nil, ctx.Err()
			case <-time.After(l.delay):
			}
		}
	}
	h.mu.Lock()
	lc.end, lc.returned = time.Now(), true
	force := h.force
	lc.forced = l.forces
	h.mu.Unlock()
	if l.forces {
		force() // before the answer: the Run's context has ended when it comes
	}
	var out []pause.Sandbox
	for _, id := range l.ids {
		switch id {
		case nilElement:
			out = append(out, nil)
		case emptyID:
			out = append(out, plainSB{&propSandbox{h: h}})
		default:
			out = append(out, h.objs[id])
		}
	}
	switch l.kind {
	case listTransient:
		return nil, errors.New("list: transient")
	case listPermanent:
		return nil, backoff.Permanent(errors.New("list: permanent"))
	case listPartial:
		return out, errors.New("list: second page failed")
	case listPanic:
		panic("lister panicked")
	}
	return out, nil
}

// newScenario generates the scenario of seed.
func newScenario(seed uint64) *scenario {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	dur := func(max time.Duration) time.Duration {
		return time.Duration(rng.Int64N(int64(max)/1e6+1)) * time.Millisecond
	}
	s := &scenario{seed: seed, sbs: make(map[string]*propSandbox)}
	// A scale for the preserves' times: a slow node, or one whose
	// preserves are short enough for many passes before the deadline.
	scale := [...]time.Duration{4 * time.Second, 4 * time.Second, 200 * time.Millisecond, 20 * time.Millisecond}[rng.IntN(4)]
	n := rng.IntN(25)
	if rng.IntN(8) == 0 { // enough for the adaptive limit to move
		n = 25 + rng.IntN(100)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("sb-%02d", i)
		sb := &propSandbox{id: ids[i], est: dur(scale), size: rng.Int64N(1 << 30), prio: rng.IntN(3), panics: rng.IntN(16) == 0}
		for range 1 + rng.IntN(3) {
			a := act{delay: dur(scale)}
			a.kind = actKind(pick(rng, 55, 15, 8, 8, 7, 7)) // ok, transient, permanent, gone, panic, hang
			sb.acts = append(sb.acts, a)
		}
		s.sbs[ids[i]] = sb
	}
	// The listings: the first lists some of the sandboxes; each later one
	// lists new ones, some listed before, an ID twice now and then.
	listed := 0
	for range 1 + rng.IntN(5) {
		var l propListing
		if listed < n {
			k := listed + 1 + rng.IntN(n-listed)
			l.ids = append(l.ids, ids[listed:k]...)
			listed = k
		}
		for range rng.IntN(3) {
			if listed > 0 {
				l.ids = append(l.ids, ids[rng.IntN(listed)])
			}
		}
		if rng.IntN(8) == 0 { // a flawed element: no Sandbox, or no ID
			l.ids = append(l.ids, [...]string{nilElement, emptyID}[rng.IntN(2)])
		}
		rng.Shuffle(len(l.ids), func(i, j int) { l.ids[i], l.ids[j] = l.ids[j], l.ids[i] })
		l.kind = listKind(pick(rng, 65, 12, 5, 12, 6)) // ok, transient, permanent, partial, panic
		if rng.IntN(4) == 0 {
			l.delay = dur(20 * time.Second)
			l.ignoreCtx = rng.IntN(2) == 0
		}
		s.listings = append(s.listings, l)
	}
	// From a generator of their own, so that every other draw of a seed is
	// what it was before listings forced.
	forces := rand.New(rand.NewPCG(seed, 0xf0ce))
	for i := range s.listings {
		s.listings[i].forces = forces.IntN(16) == 0
	}
	switch rng.IntN(4) {
	case 0: // fixed
		s.cfg.Limit = 1 + rng.IntN(6)
	case 1: // adaptive, default
	case 2: // adaptive under a ceiling
		s.cfg.MaxLimit = 1 + rng.IntN(12)
	case 3: // adaptive from a learned limit
		s.cfg.MaxLimit = 2 + rng.IntN(30)
		s.cfg.Limit = 1 + rng.IntN(s.cfg.MaxLimit)
	}
	s.cfg.CancelAtDeadline = rng.IntN(3) == 0
	s.cfg.Order = pause.Order(rng.IntN(4))
	if rng.IntN(4) == 0 {
		s.cfg.SandboxTimeout = 500*time.Millisecond + dur(5*time.Second)
	}
	initial := 50*time.Millisecond + dur(time.Second)
	s.cfg.BackOff = func() backoff.BackOff {
		return backoff.NewExponentialBackOff(backoff.WithInitialInterval(initial),
			backoff.WithRandomizationFactor(0), backoff.WithMaxElapsedTime(time.Minute))
	}
	if rng.IntN(2) == 0 {
		s.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
		s.cfg.ProgressInterval = time.Second
	}
	s.phase = time.Millisecond + dur(20*time.Second)
	s.noPhase = rng.IntN(10) == 0 // the hard deadline is the phase's too
	if rng.IntN(3) > 0 {
		s.hard = s.phase + dur(10*time.Second)
		if rng.IntN(10) == 0 { // before the phase deadline: the later of the two counts
			s.hard = time.Millisecond + dur(s.phase)
		}
	}
	hard := max(s.phase, s.hard)
	if rng.IntN(3) == 0 {
		s.tightenAt = dur(hard)
		s.tightenTo = s.tightenAt + dur(hard-s.tightenAt)
		if rng.IntN(5) == 0 { // a deadline already past
			s.tightenTo = dur(s.tightenAt)
		}
	}
	if rng.IntN(5) == 0 {
		s.cancelAt = dur(s.phase)
	}
	s.runs = 1 + rng.IntN(3)/2 // one in three Preservers runs twice
	s.traced = rng.IntN(4) == 0
	if rng.IntN(6) == 0 { // a classifier that panics on the errors it was not written for
		s.cfg.Permanent = func(err error) bool {
			if strings.Contains(err.Error(), "transient") {
				panic("classifier: not a *StatusError")
			}
			return false
		}
	}
	return s
}

// collect returns what the Runs recorded in drainkit.pause.sandboxes,
// over every outcome and by outcome, and drainkit.pause.preserve.active.
func collect(t *testing.T, reader *sdkmetric.ManualReader) (sandboxes, active int64, by map[pause.Outcome]int64) {
	by = map[pause.Outcome]int64{}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				switch m.Name {
				case pause.MetricOutcomes:
					sandboxes += dp.Value
					o, _ := dp.Attributes.Value("drainkit.pause.outcome")
					by[pause.Outcome(o.AsString())] += dp.Value
				case pause.MetricInFlight:
					active += dp.Value
				}
			}
		}
	}
	return sandboxes, active, by
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// pick returns the index of one of weights, each as likely as its weight
// out of 100.
func pick(rng *rand.Rand, weights ...int) int {
	x := rng.IntN(100)
	for i, w := range weights {
		if x < w {
			return i
		}
		x -= w
	}
	return len(weights) - 1
}

// checkScenario runs s and checks the invariants listed on
// TestRunAccountsForEverySandboxWhateverHappens. It runs in a bubble.
func checkScenario(t *testing.T, s *scenario) {
	h := &harness{calls: make(map[string][]*call), release: make(chan struct{}), s: s, objs: make(map[string]pause.Sandbox)}
	kind := 0
	for _, id := range slices.Sorted(maps.Keys(s.sbs)) {
		sb := s.sbs[id]
		sb.h = h
		h.objs[id] = sb.sandbox(kind)
		kind++
	}
	cfg := s.cfg
	if s.traced {
		h.spans, h.metrics = tracetest.NewSpanRecorder(), sdkmetric.NewManualReader()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.metrics))
		cfg.TracerProvider, cfg.MeterProvider = tp, mp
		defer func() {
			if err := errors.Join(tp.Shutdown(context.Background()), mp.Shutdown(context.Background())); err != nil {
				t.Error(err)
			}
		}()
	}
	p, err := pause.New(h, cfg)
	if err != nil {
		t.Fatalf("%v\nNew: %v", s, err)
	}
	h.p = p
	for run := 1; run <= s.runs; run++ {
		h.calls, h.lists, h.release = make(map[string][]*call), nil, make(chan struct{})
		h.ran.Store(false)
		checkRun(t, s, h, run)
	}
}

// checkRun makes the Run number run of s, over h, and checks it.
func checkRun(t *testing.T, s *scenario, h *harness, run int) {
	p := h.p
	spansBefore, sandboxesBefore, byBefore := 0, int64(0), map[pause.Outcome]int64{}
	if s.traced {
		spansBefore = len(h.spans.Ended())
		sandboxesBefore, _, byBefore = collect(t, h.metrics)
	}
	observed := p.Estimator().Count()
	start := time.Now()
	ctx, cancel := context.WithDeadline(t.Context(), start.Add(s.phase))
	defer cancel()
	var hard time.Time
	if s.hard > 0 {
		hard = start.Add(s.hard)
	}
	if s.noPhase {
		ctx, cancel = context.WithCancel(t.Context())
		defer cancel()
		hard = start.Add(max(s.phase, s.hard))
	}
	h.mu.Lock()
	h.force = cancel
	h.mu.Unlock()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var tightened atomic.Bool
	if s.tightenAt > 0 || s.tightenTo > 0 {
		wg.Go(func() {
			select {
			case <-time.After(s.tightenAt):
				tightened.Store(p.Tighten(start.Add(s.tightenTo)))
			case <-done:
			}
		})
	}
	var cancelledAt time.Time
	if s.cancelAt > 0 {
		wg.Go(func() {
			select {
			case <-time.After(s.cancelAt):
				cancelledAt = time.Now()
				cancel()
			case <-done:
			}
		})
	}
	rep := p.Run(ctx, hard)
	h.ran.Store(true)
	returned := time.Now()
	close(done)
	wg.Wait()

	// Snapshot what ran, with the Preserves that ignore their context still
	// running: they are released once it is read.
	h.mu.Lock()
	calls := make(map[string][]call, len(h.calls))
	for id, cs := range h.calls {
		for _, c := range cs {
			calls[id] = append(calls[id], *c)
		}
	}
	lists := make([]listCall, len(h.lists))
	for i, l := range h.lists {
		lists[i] = *l
	}
	h.mu.Unlock()
	close(h.release)
	time.Sleep(time.Minute) // a Lister ignoring its context, abandoned, returns
	synctest.Wait()

	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("run %d: %s\n%v", run, fmt.Sprintf(format, args...), s)
	}

	// The deadlines as the Run had them.
	phaseEnd := start.Add(s.phase)
	hardEnd := start.Add(max(s.phase, s.hard))
	if s.noPhase {
		phaseEnd = hardEnd
	}
	phase0 := phaseEnd
	if tightened.Load() {
		to := start.Add(s.tightenTo)
		hardEnd = to
		if to.Before(phaseEnd) {
			phaseEnd = to
		}
	}
	// The Report says the deadlines Tighten set; one set in the past ended
	// the phase, and the Run, when Tighten was called.
	reportedPhase, reportedHard := phaseEnd, hardEnd
	if at := start.Add(s.tightenAt); tightened.Load() && hardEnd.Before(at) {
		hardEnd, phaseEnd = at, earliest(phase0, at)
	}
	// deadlineAt returns the Deadline a Preserve's context has when it is
	// called at, and whether that is known: not at the instant of the
	// Tighten.
	origHard := start.Add(max(s.phase, s.hard))
	deadlineAt := func(at time.Time) (time.Time, bool) {
		phase, hard := start.Add(s.phase), origHard
		if s.noPhase {
			phase = hard
		}
		moved := tightened.Load() && at.After(start.Add(s.tightenAt))
		if moved {
			hard = start.Add(s.tightenTo)
			phase = earliest(phase, hard)
		}
		if s.cfg.CancelAtDeadline {
			hard = earliest(hard, phase)
		}
		return hard, !tightened.Load() || !at.Equal(start.Add(s.tightenAt))
	}
	// The earliest listing that forced the Run, if one did before the
	// scripted cancel: the Run's context ended then. Its own answer is
	// taken or not (the Run's wait may see the cancel first): maybe.
	for _, l := range lists {
		if l.forced && (cancelledAt.IsZero() || l.end.Before(cancelledAt)) {
			cancelledAt = l.end
		}
	}
	startsEnd := phaseEnd // no Preserve starts after it
	if !cancelledAt.IsZero() && cancelledAt.Before(startsEnd) {
		startsEnd = cancelledAt
	}

	// 9. Deadlines, passes.
	if !rep.Deadline.Equal(reportedPhase) {
		fail("Report.Deadline %v, want the phase deadline %v", rep.Deadline.Sub(start), reportedPhase.Sub(start))
	}
	if tightened.Load() && !rep.Hard.Equal(reportedHard) {
		fail("Report.Hard %v, want the tightened %v", rep.Hard.Sub(start), reportedHard.Sub(start))
	}
	if !tightened.Load() && (hardEnd.Equal(phaseEnd) != rep.Hard.IsZero() || !rep.Hard.IsZero() && !rep.Hard.Equal(hardEnd)) {
		fail("Report.Hard %v, the hard deadline %v, the phase's %v", rep.Hard, hardEnd.Sub(start), phaseEnd.Sub(start))
	}
	if rep.Passes > len(lists) {
		fail("Passes %d, but %d listings made", rep.Passes, len(lists))
	}

	// 7. Run returns in time; only Preserves ignoring their context still run.
	if latest := hardEnd.Add(pause.ReturnSlack); returned.After(latest) {
		fail("Run returned at %v, past the hard deadline %v and its slack", returned.Sub(start), hardEnd.Sub(start))
	}
	if !rep.Start.Equal(start) || rep.End.Before(rep.Start) || rep.End.After(returned) {
		fail("Report Start %v End %v, Run from 0 to %v", rep.Start.Sub(start), rep.End.Sub(start), returned.Sub(start))
	}
	running := make(map[string]bool)
	for id, cs := range calls {
		for _, c := range cs {
			if c.afterRun {
				fail("%s: Preserve called after Run returned", id)
			}
			if c.start.After(startsEnd) {
				fail("%s: Preserve started at %v, after the phase ended at %v", id, c.start.Sub(start), startsEnd.Sub(start))
			}
			if want, known := deadlineAt(c.start); c.deadline.IsZero() || known && s.cfg.SandboxTimeout == 0 && !c.deadline.Equal(want) ||
				c.deadline.After(want) && (known || c.deadline.After(origHard)) {
				fail("%s: Preserve's context deadline %v, want %v", id, c.deadline.Sub(start), want.Sub(start))
			}
			if c.start.After(c.deadline) {
				fail("%s: Preserve started at %v, past its context's deadline %v", id, c.start.Sub(start), c.deadline.Sub(start))
			}
			if !c.returned {
				running[id] = true
				if c.act.kind != actHang {
					fail("%s: a Preserve that honours its context (%v) still ran when Run returned", id, c.act)
				}
			}
			if c.limit < 1 || c.limit > maxLimitOf(s.cfg) {
				fail("%s: Preserver.Limit %d during the Run, outside [1, %d]", id, c.limit, maxLimitOf(s.cfg))
			}
		}
	}

	// 8. The limit.
	maxAtOnce := maxLimitOf(s.cfg)
	if fixed(s.cfg) && s.cfg.Limit > 0 {
		maxAtOnce = s.cfg.Limit
	}
	// A task's bound runs from its first call; its Preserve is abandoned,
	// its slot given to the next, a second after the bound.
	boundStart := map[context.Context]time.Time{}
	for _, cs := range calls {
		for _, c := range cs {
			if b, ok := boundStart[c.ctx]; !ok || c.start.Before(b) {
				boundStart[c.ctx] = c.start
			}
		}
	}
	runningAt := func(at time.Time) int {
		n := 0
		for _, cs := range calls {
			for _, c := range cs {
				switch {
				case c.start.After(at), c.returned && !c.end.After(at):
				case s.cfg.SandboxTimeout > 0 && !boundStart[c.ctx].Add(s.cfg.SandboxTimeout+pause.AbandonAfter).After(at):
				default:
					n++
				}
			}
		}
		return n
	}
	for id, cs := range calls {
		for _, c := range cs {
			if n := runningAt(c.start); n > maxAtOnce {
				fail("%s: started at %v with %d preserves running (not abandoned), above %d", id, c.start.Sub(start), n, maxAtOnce)
			}
		}
	}
	if rep.Limit < 1 || rep.Limit > maxLimitOf(s.cfg) {
		fail("Report.Limit %d outside [1, %d]", rep.Limit, maxLimitOf(s.cfg))
	}
	if fixed(s.cfg) && (rep.Limit != maxAtOnce || rep.LearnedLimit != 0) {
		fail("a fixed limit %d reported Limit %d LearnedLimit %d", maxAtOnce, rep.Limit, rep.LearnedLimit)
	}
	// Preserver.Limit after the Run: the fixed limit; the level the Run
	// ended at, or with no Config.Limit 1 until a preserve was measured
	// (preserved at its first attempt), or a learned Config.Limit below it
	// not yet tested.
	for _, cs := range calls {
		if c := cs[0]; c.returned && c.err == nil && !c.panicked && c.end.After(c.start) {
			h.measured = true
			h.surelyMeasured = h.surelyMeasured || c.end.Before(phaseEnd)
		}
	}
	measured, surelyMeasured := h.measured, h.surelyMeasured
	switch after := p.Limit(); {
	case fixed(s.cfg):
		if after != maxAtOnce {
			fail("Preserver.Limit %d after the Run, the fixed limit %d", after, maxAtOnce)
		}
	case s.cfg.Limit == 0 && !measured:
		if after != 1 {
			fail("Preserver.Limit %d after a Run that measured no preserve, want 1", after)
		}
	case s.cfg.Limit == 0 && surelyMeasured:
		if after != rep.Limit {
			fail("Preserver.Limit %d after the Run, Report.Limit %d", after, rep.Limit)
		}
	case s.cfg.Limit > 0:
		if after != rep.Limit && (after != s.cfg.Limit || s.cfg.Limit > rep.Limit) {
			fail("Preserver.Limit %d after the Run, Report.Limit %d, Config.Limit %d", after, rep.Limit, s.cfg.Limit)
		}
	}
	if rep.LearnedLimit < 0 || rep.LearnedLimit > maxLimitOf(s.cfg) {
		fail("LearnedLimit %d outside [0, %d]", rep.LearnedLimit, maxLimitOf(s.cfg))
	}

	// 1. One entry per ID listed. A listing returned before the phase
	// ended was surely taken; one returned as it ended maybe.
	surely, maybe := map[string]bool{}, map[string]bool{}
	maxRepeats := map[string]int{}  // the most times an ID is repeated in a listing that maybe was taken
	sureRepeats := map[string]int{} // the same, in a listing surely taken
	okSurely, okMaybe, partlyMaybe, partlySurely := false, false, false, false
	dropped, tie := hedgedOut(lists)
	for i, l := range lists {
		if !l.returned || l.end.After(phaseEnd) || !cancelledAt.IsZero() && l.end.After(cancelledAt) || dropped[i] {
			continue
		}
		sure := l.end.Before(phaseEnd) && (cancelledAt.IsZero() || l.end.Before(cancelledAt)) && !tie[i]
		k := l.listing.kind
		if k == listOK || k == listPartial {
			count := map[string]int{}
			for _, id := range l.listing.ids {
				if id == nilElement || id == emptyID || s.sbs[id].panics {
					key := id
					if id != nilElement && id != emptyID {
						key = panicking + id
					}
					count[key]++
					maxRepeats[key] = max(maxRepeats[key], count[key])
					if sure {
						sureRepeats[key] = max(sureRepeats[key], count[key])
					}
					continue
				}
				maybe[id] = true
				if sure {
					surely[id] = true
				}
				count[id]++
				maxRepeats[id] = max(maxRepeats[id], count[id]-1)
				if sure {
					sureRepeats[id] = max(sureRepeats[id], count[id]-1)
				}
			}
		}
		okMaybe = okMaybe || k == listOK
		okSurely = okSurely || k == listOK && sure
		partlyMaybe = partlyMaybe || k == listPartial && len(l.listing.ids) > 0
		partlySurely = partlySurely || k == listPartial && len(l.listing.ids) > 0 && sure
	}
	entries := map[string]pause.Entry{}
	flawEntries := map[string]int{}
	for i, e := range rep.Entries {
		if e.Pass < 1 || e.Pass > rep.Passes || i > 0 && e.Pass < rep.Entries[i-1].Pass {
			fail("%s: entry %d of pass %d, in a Run of %d passes whose entries are in the order first listed", e.ID, i, e.Pass, rep.Passes)
		}
		if flaw := flawOf(e); flaw != "" {
			flawEntries[flaw]++
			if e.Outcome != pause.Failed || e.Attempts != 0 {
				fail("%s: flaw entry %+v is not Failed with no attempt", e.ID, e)
			}
			continue
		}
		if _, dup := entries[e.ID]; dup {
			fail("%s: two entries", e.ID)
		}
		entries[e.ID] = e
		if !maybe[e.ID] {
			fail("%s: an entry, but no listing the Run took listed it", e.ID)
		}
	}
	for id := range surely {
		if _, ok := entries[id]; !ok {
			fail("%s: listed before the phase ended, and no entry", id)
		}
	}
	// A listing that answered as the Run ended (one that forces it as
	// it answers) may not have been taken: its repeats bound the flaw
	// entries from above only.
	for id, n := range sureRepeats {
		if n > 0 && flawEntries[id] < n {
			fail("%s: repeated %d times in a listing surely taken, %d flaw entries", id, n, flawEntries[id])
		}
	}
	for id, n := range flawEntries {
		if n > maxRepeats[id] {
			fail("%s: %d flaw entries, but repeated at most %d times in a listing", id, n, maxRepeats[id])
		}
	}

	// 2. Counts.
	counts := map[pause.Outcome]int{}
	for _, e := range rep.Entries {
		counts[e.Outcome]++
	}
	sum := 0
	for o, n := range rep.Counts {
		sum += n
		if counts[o] != n {
			fail("Counts[%s] %d, %d entries", o, n, counts[o])
		}
	}
	if sum != len(rep.Entries) {
		fail("Counts sum to %d, %d entries", sum, len(rep.Entries))
	}
	if lost := counts[pause.Failed] + counts[pause.TimedOut] + counts[pause.NotStarted]; rep.Lost() != lost {
		fail("Lost %d, %d entries lost", rep.Lost(), lost)
	}

	// 3. Err, Unknown, Incomplete.
	if rep.Unknown && rep.Incomplete {
		fail("Unknown and Incomplete both set")
	}
	if (rep.Unknown || rep.Incomplete) && rep.ListErr == "" {
		fail("Unknown %v Incomplete %v, and no ListErr to say why", rep.Unknown, rep.Incomplete)
	}
	for _, text := range append([]string{rep.ListErr}, errorsOf(rep)...) {
		if strings.Contains(text, "%!") {
			fail("a Report's text with a formatting fault: %q", text)
		}
	}
	if okSurely && (rep.Unknown || rep.Incomplete) {
		fail("a listing succeeded, yet Unknown %v Incomplete %v", rep.Unknown, rep.Incomplete)
	}
	if !okMaybe && !partlyMaybe && !rep.Unknown {
		fail("no listing succeeded nor gave sandboxes, yet not Unknown")
	}
	if !okMaybe && partlySurely && !rep.Incomplete {
		fail("no listing succeeded, one gave sandboxes, yet not Incomplete")
	}
	if wantNil := !rep.Unknown && !rep.Incomplete && rep.Lost() == 0; (rep.Err() == nil) != wantNil {
		fail("Err %v, want nil: %v", rep.Err(), wantNil)
	}

	// 10. The order a pass starts its new sandboxes in: priority first;
	// with a fixed limit, FIFO in listing order, longest first by estimate.
	type started struct {
		e     pause.Entry
		at    time.Time
		index int // in its first listing
	}
	byPass := map[int][]started{}
	for i, e := range rep.Entries {
		if cs := calls[e.ID]; len(cs) > 0 && flawOf(e) == "" {
			byPass[e.Pass] = append(byPass[e.Pass], started{e, cs[0].start, i})
		}
	}
	for pass, ss := range byPass {
		for _, x := range ss {
			for _, y := range ss {
				if x.e.Priority > y.e.Priority && x.at.After(y.at) {
					fail("pass %d: %s (priority %d) started at %v, after %s (priority %d) at %v", pass,
						x.e.ID, x.e.Priority, x.at.Sub(start), y.e.ID, y.e.Priority, y.at.Sub(start))
				}
				if x.e.Priority != y.e.Priority || !fixed(s.cfg) {
					continue
				}
				if s.cfg.Order == pause.OrderFIFO && x.index < y.index && x.at.After(y.at) {
					fail("pass %d, FIFO: %s started at %v, after %s listed after it at %v", pass, x.e.ID, x.at.Sub(start), y.e.ID, y.at.Sub(start))
				}
				if s.cfg.Order == pause.OrderLongestFirst && x.e.Estimate > y.e.Estimate && y.e.Estimate > 0 && x.at.After(y.at) {
					fail("pass %d, longest first: %s (%v) started at %v, after %s (%v) at %v", pass,
						x.e.ID, x.e.Estimate, x.at.Sub(start), y.e.ID, y.e.Estimate, y.at.Sub(start))
				}
			}
		}
	}

	// 11. Telemetry: a pause.Preserve span, ended, per preserve started
	// (each with a context of its own); the Run span's counts; one
	// drainkit.pause.sandboxes per sandbox and per relisting; no preserve
	// active once Run returned.
	if s.traced {
		ended := h.spans.Ended()[spansBefore:]
		if len(h.spans.Started()) != len(h.spans.Ended()) {
			fail("%d spans started, %d ended", len(h.spans.Started()), len(h.spans.Ended()))
		}
		perID := map[string]int{}
		var runSpan sdktrace.ReadOnlySpan
		for _, sp := range ended {
			switch sp.Name() {
			case "pause.Run":
				runSpan = sp
			case "pause.Preserve":
				perID[attr(sp.Attributes(), "drainkit.pause.sandbox").AsString()]++
			}
		}
		for id, cs := range calls {
			tasks := map[context.Context]bool{}
			for _, c := range cs {
				tasks[c.ctx] = true
			}
			if perID[id] != len(tasks) {
				fail("%s: %d pause.Preserve spans, %d preserves started", id, perID[id], len(tasks))
			}
		}
		if runSpan == nil {
			fail("no pause.Run span")
		} else {
			for o, n := range rep.Counts {
				if got := attr(runSpan.Attributes(), "drainkit.pause."+string(o)).AsInt64(); got != int64(n) {
					fail("pause.Run span: %s %d, Counts %d", o, got, n)
				}
			}
		}
		sandboxes, active, by := collect(t, h.metrics)
		want, relisted := int64(0), false
		wantBy := map[pause.Outcome]int64{}
		for _, e := range rep.Entries {
			if flawOf(e) == "" {
				want += 1 + int64(e.Relisted)
				wantBy[e.Outcome]++
				relisted = relisted || e.Relisted > 0
			}
		}
		if sandboxes-sandboxesBefore != want {
			fail("drainkit.pause.sandboxes counted %d, want %d (an entry per sandbox, one per relisting)", sandboxes-sandboxesBefore, want)
		}
		for _, o := range []pause.Outcome{pause.Preserved, pause.Failed, pause.TimedOut, pause.NotStarted, pause.Vanished} {
			// With no relisting, one count per entry, by the Report's outcome.
			if got := by[o] - byBefore[o]; !relisted && got != wantBy[o] {
				fail("drainkit.pause.sandboxes{%s} counted %d, the Report %d", o, got, wantBy[o])
			}
		}
		if active != 0 {
			fail("drainkit.pause.preserve.active %d after Run returned", active)
		}
	}

	// 12. The Estimator is fed every sandbox's first preserve that
	// succeeded, not a preserve again.
	fed, relisted := 0, 0
	for _, e := range entries {
		switch {
		case e.Relisted > 0:
			relisted++
		case e.Outcome == pause.Preserved:
			fed++
		}
	}
	if n := p.Estimator().Count() - observed; n < fed || n > fed+relisted {
		fail("the Estimator was fed %d preserves, want %d (and up to %d relisted)", n, fed, relisted)
	}

	// 4, 5. Each entry as its sandbox saw it.
	for id, e := range entries {
		cs := calls[id]
		if e.Attempts != len(cs) {
			fail("%s: Attempts %d, %d Preserve calls", id, e.Attempts, len(cs))
		}
		if e.Relisted > max(rep.Passes-1, 0) {
			fail("%s: Relisted %d in %d passes", id, e.Relisted, rep.Passes)
		}
		if e.Start.IsZero() != (e.Outcome == pause.NotStarted) {
			fail("%s: %s with Start %v", id, e.Outcome, e.Start)
		}
		if !e.Start.IsZero() && (e.Start.Before(rep.Start) || e.End.Before(e.Start) || e.Duration != e.End.Sub(e.Start)) {
			fail("%s: Start %v End %v Duration %v", id, e.Start.Sub(start), e.End.Sub(start), e.Duration)
		}
		if e.End.Before(rep.Start) || e.End.After(rep.End) {
			fail("%s: End %v outside the Run (0 to %v)", id, e.End.Sub(start), rep.End.Sub(start))
		}
		if len(cs) == 0 {
			if e.Outcome != pause.NotStarted {
				fail("%s: %s, but never called", id, e.Outcome)
			}
			continue
		}
		last := cs[len(cs)-1]
		gone := last.returned && errors.Is(last.err, pause.ErrGone)
		if e.Relisted == 0 && e.Outcome != pause.NotStarted && !e.Start.Equal(cs[0].start) {
			fail("%s: Start %v, its first Preserve called at %v", id, e.Start.Sub(start), cs[0].start.Sub(start))
		}
		// A transient error is Failed when no retry fits: at the end of
		// the wait that found it so, or the cancel that cut it.
		atReturn := e.Outcome == pause.Preserved || e.Outcome == pause.Vanished || last.act.kind == actPermanent || last.act.kind == actPanic
		if last.returned && (atReturn && !e.End.Equal(last.end) || e.End.Before(last.end)) {
			fail("%s: %s at %v, its last Preserve returned at %v", id, e.Outcome, e.End.Sub(start), last.end.Sub(start))
		}
		switch e.Outcome {
		case pause.Preserved:
			if !last.returned || !(last.err == nil && !last.panicked || gone && e.Relisted > 0) {
				fail("%s: Preserved, but its last Preserve %+v", id, last)
			}
		case pause.Vanished:
			if !gone {
				fail("%s: Vanished, but its last Preserve %+v", id, last)
			}
		case pause.Failed:
			if !last.returned || last.err == nil && !last.panicked || gone {
				fail("%s: Failed, but its last Preserve %+v", id, last)
			}
			if last.panicked && e.Stack == "" {
				fail("%s: panicked, no stack", id)
			}
		case pause.TimedOut:
			if last.returned && !errors.Is(last.err, context.Canceled) && !errors.Is(last.err, context.DeadlineExceeded) && last.end.Before(e.End) {
				fail("%s: TimedOut, but its last Preserve returned %v at %v before %v", id, last.err, last.end.Sub(start), e.End.Sub(start))
			}
		case pause.NotStarted:
			if e.Relisted == 0 {
				fail("%s: NotStarted, but called %d times", id, len(cs))
			}
		}
		if running[id] && e.Outcome != pause.TimedOut {
			fail("%s: its Preserve still ran when Run returned, reported %s", id, e.Outcome)
		}
	}
}

// flawOf returns what entry e reports as a flawed listing element: the ID
// it repeats, nilElement, emptyID, or panicking and the ID of a sandbox
// whose Priority panicked; "" when it is a sandbox's entry.
func flawOf(e pause.Entry) string {
	switch {
	case strings.Contains(e.Error, "more than once in the listing"):
		return e.ID
	case strings.Contains(e.Error, "nil Sandbox"):
		return nilElement
	case strings.Contains(e.Error, "empty ID"):
		return emptyID
	case strings.Contains(e.Error, "panicked: priority not ready"):
		return panicking + e.ID
	}
	return ""
}

// maxLimitOf returns the most preserves at once cfg allows.
func maxLimitOf(cfg pause.Config) int {
	switch {
	case cfg.MaxLimit > 0:
		return cfg.MaxLimit
	case cfg.Limit > 0:
		return cfg.Limit
	}
	return 32
}

// fixed reports whether cfg fixes the limit.
func fixed(cfg pause.Config) bool {
	return cfg.Limit > 0 && cfg.MaxLimit == 0 || maxLimitOf(cfg) == 1
}

// errorsOf returns the Error of every entry of rep that has one.
func errorsOf(rep *pause.Report) []string {
	var out []string
	for _, e := range rep.Entries {
		if e.Error != "" {
			out = append(out, e.Error)
		}
	}
	return out
}
