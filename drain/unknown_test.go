package drain

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/pause"
)

// Fault: the listing fails every time (the runtime's API answers 500).
// Twenty sandboxes run, none is preserved, and no entry is lost because
// none was ever listed: the preserve phase is Failed, not OK, and the
// Report's error says the sandboxes are unknown, with the last error.
func TestFailedListingIsUnknownNotSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: 2 * time.Second,
			sandboxes: 20, latency: time.Second, limit: 4})
		f.node.ListErr = func(int) error { return errors.New("500 Internal Server Error") }
		rep := f.d.Shutdown(context.Background())
		assert.Zero(t, rep.Lost())
		pres := rep.Phase(PhasePreserve)
		require.NotNil(t, pres)
		assert.Equal(t, Failed, pres.Result)
		assert.Contains(t, pres.Error, "unknown")
		require.Error(t, rep.Err())
		assert.Contains(t, rep.Err().Error(), "500 Internal Server Error")
		// The gate phase's count failed too, and said only in the log (a
		// review, whose Lister hung past the gate's deadline: "ok").
		assert.Equal(t, "counting the running sandboxes failed after 0s (logged); the preserve phase lists them itself",
			rep.Phase(PhaseGate).Error)
	})
}

// Fault (row 1234): with no preStop count, the gate phase counts the
// running sandboxes with the preserve phase's deadline for its bound. A
// listing that hangs once and works when called again (an HTTP Lister on
// a connection left half open by a runtime daemon that restarted: no
// answer until the caller gives up, and the next call connects anew) held
// the count to that deadline, and the preserve phase began at it: no time
// to list, 4 of 4 sandboxes unknown with 27 s of a 30 s grace spent
// waiting. The count now gives up halfway to it:
//
//	0 s      SIGTERM: the gate counts; the call hangs
//	13.5 s   the count gives up (half of 27 s); the preserve phase lists
//	17.5 s   4 preserved, 1 s each, one at a time
func TestACountThatHangsLeavesThePreservePhaseHalfItsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hung *hangsOnce
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, sandboxes: 4, latency: time.Second,
			edit: func(c *Config) {
				hung = &hangsOnce{Lister: c.Sandboxes}
				c.Sandboxes = hung
			}})
		rep := f.d.Shutdown(context.Background())
		require.NoError(t, rep.Err())
		assert.Equal(t, 4, rep.Preserve.Counts[pause.Preserved])
		gate := rep.Phase(PhaseGate)
		assert.Equal(t, 13500*time.Millisecond, gate.End.Sub(rep.Start), "the count gave up halfway to the preserve deadline")
		assert.Equal(t, "counting the running sandboxes failed after 13.5s (logged); the preserve phase lists them itself", gate.Error)
		assert.Equal(t, 17500*time.Millisecond, rep.Phase(PhasePreserve).End.Sub(rep.Start))
	})
}

// hangsOnce is a Lister whose first call answers only when its context
// ends, and the later ones as Lister does.
type hangsOnce struct {
	pause.Lister
	calls atomic.Int32
}

func (h *hangsOnce) List(ctx context.Context) ([]pause.Sandbox, error) {
	if h.calls.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.Lister.List(ctx)
}

// Fault found under the real kubelet: the kubelet's grace ran out while
// the preStop hook was still open, which leaves the 2 s floor; the
// critical device step's reserve takes all of it, the preserve window is
// empty and the Preserver cannot list before its deadline. The sandboxes
// the preStop wait counted are still accounted for: each is in the
// Report, not started, and lost — not "unknown".
func TestEmptyPreserveWindowStillAccountsForTheCountedSandboxes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		daemon := stepOf("ublk", 2*time.Second, true, func(context.Context) error { return nil })
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: time.Second,
			sandboxes: 4, latency: time.Second, limit: 4, steps: []Step{daemon}})
		tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 4*time.Second)
		require.True(t, tl.HookKept, "the kubelet gave up on the hook")
		pres := rep.Phase(PhasePreserve)
		require.NotNil(t, pres)
		require.Zero(t, pres.Deadline.Sub(pres.Start), "the critical step took the whole window")
		require.NotNil(t, rep.Preserve)
		assert.False(t, rep.Preserve.Unknown, "the preStop wait's count listed them")
		require.Len(t, rep.Preserve.Entries, 4)
		for _, e := range rep.Preserve.Entries {
			assert.Equal(t, pause.NotStarted, e.Outcome, e.ID)
			assert.Zero(t, e.Pass, "listed by the drain's count, not by a pass")
			assert.Contains(t, e.Error, "count")
		}
		assert.Equal(t, 4, rep.Lost())
		require.Error(t, rep.Err())
		assert.Contains(t, rep.Err().Error(), "4 of 4 sandboxes not preserved")
	})
}

// brokenPreserver panics, or returns no Report, instead of accounting for
// the sandboxes.
type brokenPreserver struct{ panics bool }

func (b brokenPreserver) Run(context.Context, time.Time) *pause.Report {
	if b.panics {
		panic("preserver bug")
	}
	return nil
}

func (brokenPreserver) Limit() int                     { return 1 }
func (brokenPreserver) Estimator() *deadline.Estimator { return nil }

// Fault: the preserve phase left no pause Report (the Preserver was
// abandoned at its hard deadline, panicked or returned none) while the
// drain's count had seen six sandboxes running. Report.Lost said 0, so a
// caller reading it (a metrics exporter, an exit-code policy) read "none
// lost". The six the count saw are unaccounted: Lost counts them, and Err
// says how many.
//
//	SIGTERM (T0) -> gate: the count lists 6 -> preserve: no pause Report
//	  -> Report: Preserve nil, Unaccounted 6, Lost 6
func TestPreserverWithoutAReportLeavesTheCountedSandboxesLost(t *testing.T) {
	for name, tc := range map[string]struct {
		preserver func(release chan struct{}) Preserver
		result    Result
	}{
		"abandoned": {func(release chan struct{}) Preserver { return hungPreserver{release} }, Abandoned},
		"panicked":  {func(chan struct{}) Preserver { return brokenPreserver{panics: true} }, Failed},
		"no Report": {func(chan struct{}) Preserver { return brokenPreserver{} }, Failed},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				rec := tracetest.NewSpanRecorder()
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
				f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second,
					sandboxes: 6, latency: time.Second, limit: 4,
					edit: func(c *Config) { c.Preserver, c.TracerProvider = tc.preserver(release), tp }})
				rep := f.d.Shutdown(context.Background())
				close(release)
				require.Equal(t, tc.result, rep.Phase(PhasePreserve).Result)
				require.Nil(t, rep.Preserve, "the preserve phase left no account")
				assert.Equal(t, 6, rep.Unaccounted, "the drain's count")
				assert.Equal(t, 6, rep.Lost(), "the six the drain counted are not known to be preserved")
				require.Error(t, rep.Err())
				assert.Contains(t, rep.Err().Error(), "6 sandbox(es) unaccounted for")
				root := spansOf(rec)["drain.shutdown"]
				require.NotNil(t, root)
				assert.Equal(t, int64(6), attrOf(root.Attributes(), "drainkit.drain.lost").AsInt64(), "the span says it too")
				require.NoError(t, tp.Shutdown(context.Background()))
			})
		})
	}
}

// Fault: the runtime's API lists sandboxes a page at a time, and from
// the preserve phase on its page 2 fails (503) at every listing. The
// drain's count before the preserve phase listed all four:
//
//	count (gate phase)  [sb-0 sb-1 sb-2 sb-3]          complete
//	preserve, pass 1    [sb-0 sb-1], "page 2: 503"     both preserved
//	preserve, later     [], "page 2: 503"              retried to the deadline
//
// sb-2 and sb-3 run on, and SIGKILL takes them: the Report names them,
// not started, from the count, next to the two the Run preserved, each
// sandbox once, and the preserve phase fails saying the listing was
// incomplete.
func TestIncompleteListingIsCompletedFromTheCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var node *fakesandbox.Node
		lists := 0
		paged := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			running, err := node.List(ctx)
			if lists++; lists == 1 || err != nil {
				return running, err
			}
			var page1 []pause.Sandbox
			for _, sb := range running {
				if id := sb.ID(); id == "sb-0" || id == "sb-1" {
					page1 = append(page1, sb)
				}
			}
			return page1, errors.New("page 2: 503 Service Unavailable")
		})
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: 2 * time.Second,
			sandboxes: 4, latency: time.Second, limit: 4,
			edit: func(c *Config) { c.Sandboxes = paged }})
		node = f.node
		rep := f.d.Shutdown(context.Background())
		require.NotNil(t, rep.Preserve)
		outcomes := map[string]pause.Outcome{}
		for _, e := range rep.Preserve.Entries {
			_, twice := outcomes[e.ID]
			assert.False(t, twice, "%s has one entry", e.ID)
			outcomes[e.ID] = e.Outcome
		}
		assert.Equal(t, map[string]pause.Outcome{
			"sb-0": pause.Preserved, "sb-1": pause.Preserved,
			"sb-2": pause.NotStarted, "sb-3": pause.NotStarted,
		}, outcomes)
		assert.Equal(t, 2, rep.Lost(), "SIGKILL takes the two page 2 held")
		assert.True(t, rep.Preserve.Incomplete)
		pres := rep.Phase(PhasePreserve)
		require.NotNil(t, pres)
		assert.Equal(t, Failed, pres.Result)
		assert.Contains(t, pres.Error, "no listing was complete")
		assert.Contains(t, pres.Error, "page 2: 503")
	})
}
