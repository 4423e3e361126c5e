package pause_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// A Run whose every listing failed knows nothing about the node: the
// Report says the sandboxes are unknown and Err carries the last error,
// even though no entry was lost.
func TestListingThatNeverSucceededIsUnknownNotSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 20, time.Second)
		n := 0
		node.ListErr = func(int) error { n++; return errors.New("list: 500 Internal Server Error") }
		p, err := pause.New(node, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, 10*time.Second, 0)
		assert.Zero(t, rep.Lost())
		assert.True(t, rep.Unknown, "no listing succeeded")
		require.Error(t, rep.Err())
		assert.Contains(t, rep.Err().Error(), "no listing succeeded")
		assert.Contains(t, rep.Err().Error(), "500 Internal Server Error")
		assert.Greater(t, n, 1, "the listing was retried")
	})
}

// runWhileLaterListingsFail runs a Preserver for a minute, with a 10 s
// back-off, over a node of two sandboxes whose first listing succeeds and
// every later one fails with "runtime unavailable". It returns the Report,
// how long Run took, and the node. Call it inside a synctest bubble.
func runWhileLaterListingsFail(t *testing.T) (*pause.Report, time.Duration, *fakesandbox.Node) {
	t.Helper()
	node := fakesandbox.NewNode()
	node.AddN("sb", 2, time.Second)
	node.ListErr = func(n int) error {
		if n >= 2 {
			return errors.New("runtime unavailable")
		}
		return nil
	}
	p, err := pause.New(node, pause.Config{BackOff: constant(10 * time.Second)})
	require.NoError(t, err)
	rep, took := runFor(t, p, time.Minute, 0)
	return rep, took, node
}

// One listing that succeeded is enough to know the node: a later pass
// failing to list leaves the Report known, with the error noted.
func TestLaterListingFailureIsNotUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep, _, _ := runWhileLaterListingsFail(t)
		assert.False(t, rep.Unknown)
		assert.NoError(t, rep.Err())
		assert.Equal(t, "runtime unavailable", rep.ListErr)
	})
}

// A Lister that panics is recovered like a Preserve: the Run goes on, the
// listing is retried, and the Report names the panic.
func TestListerPanicIsRecovered(t *testing.T) {
	for _, hard := range []time.Duration{0, 20 * time.Second} { // listed inline, then in a goroutine
		synctest.Test(t, func(t *testing.T) {
			node := fakesandbox.NewNode()
			node.AddN("sb", 2, time.Second)
			calls := 0
			p, err := pause.New(pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
				if calls++; calls == 1 {
					panic("lister bug")
				}
				return node.List(ctx)
			}), pause.Config{BackOff: constant(time.Second)})
			require.NoError(t, err)
			rep, _ := runFor(t, p, 10*time.Second, hard)
			assert.Equal(t, 2, rep.Counts[pause.Preserved], "hard %v", hard)
			assert.NoError(t, rep.Err())

			p, err = pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { panic("always") }), pause.Config{BackOff: constant(time.Second)})
			require.NoError(t, err)
			rep, _ = runFor(t, p, 10*time.Second, hard)
			assert.True(t, rep.Unknown)
			assert.Contains(t, rep.ListErr, "panicked: always")
		})
	}
}

// A typed nil Lister (a nil *Node in a Lister) is rejected at New, not
// found at SIGTERM time.
func TestNewRejectsTypedNilLister(t *testing.T) {
	var node *fakesandbox.Node
	p, err := pause.New(node, pause.Config{})
	require.Error(t, err)
	assert.Nil(t, p)
	assert.Contains(t, err.Error(), "pause: the Lister must not be nil")
}

// idPanics is a Sandbox whose ID panics.
type idPanics struct{ preserved bool }

func (*idPanics) ID() string { panic("ID bug") }
func (s *idPanics) Preserve(context.Context) error {
	s.preserved = true
	return nil
}

// A listing's flaws are reported, never collapsed or dropped: a nil
// Sandbox, an empty ID, an ID listed twice and a Sandbox whose ID panics
// each get a Failed entry saying why; the good sandboxes are preserved.
func TestListingFlawsAreReportedNotDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		good := node.AddN("sb", 2, time.Second)
		empty := &fakesandbox.Sandbox{Name: "", Latency: time.Second}
		node.Add(empty)
		bad := &idPanics{}
		p, err := pause.New(pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			list, err := node.List(ctx)
			if len(list) == 0 {
				return list, err
			}
			if good[0].Preserved() { // a Lister lists only what still needs preserving
				return append(list, nil, bad), err
			}
			return append(list, nil, good[0], bad), err
		}), pause.Config{})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		assert.Equal(t, 4, rep.Counts[pause.Failed], "%+v", rep.Entries)
		assert.Len(t, rep.Entries, 6, "one entry for every element of the listing")
		var errs []string
		for _, e := range rep.Entries {
			if e.Outcome == pause.Failed {
				errs = append(errs, e.Error)
			}
		}
		assert.Contains(t, errs[0], "empty ID")
		assert.Contains(t, errs[1], "nil Sandbox")
		assert.Contains(t, errs[2], `ID "sb-0" more than once`)
		assert.Contains(t, errs[3], "ID bug")
		assert.False(t, bad.preserved)
		assert.Error(t, rep.Err())
	})
}

// flakyPriority's Priority panics the first time it is asked.
type flakyPriority struct {
	*fakesandbox.Sandbox
	asked bool
}

func (f *flakyPriority) Priority() int {
	if !f.asked {
		f.asked = true
		panic("priority not ready")
	}
	return 0
}

// Listings that reorder, grow and repeat themselves between passes are
// admitted by ID, not by position: an ID listed twice is a flaw; a
// sandbox an earlier pass preserved and a later listing has again (b,
// resumed between the passes) is preserved again, once, even when that
// listing has it twice (the second a flaw) and at another index; and an
// element whose entry panicked is admitted by the next listing that can
// read it, even at the same index.
func TestListingsThatChangeBetweenPassesAreAdmittedByID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sb := map[string]*fakesandbox.Sandbox{}
		for _, id := range []string{"a", "b", "c", "d", "e", "x"} {
			sb[id] = &fakesandbox.Sandbox{Name: id, Latency: time.Second}
		}
		x := &flakyPriority{Sandbox: sb["x"]}
		listings := [][]pause.Sandbox{
			{sb["a"], sb["b"], sb["c"], sb["d"], x},
			{sb["e"], sb["b"], sb["b"], sb["e"], x},
			{},
		}
		p, err := pause.New(&scripted{listings: listings}, pause.Config{})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		assert.Equal(t, 3, rep.Passes, "the third listing finds nothing")
		for id, s := range sb {
			want := 1
			if id == "b" {
				want = 2
			}
			assert.Equal(t, want, s.Attempts(), "sandbox %s", id)
		}
		assert.Equal(t, 6, rep.Counts[pause.Preserved])
		b := entry(t, rep, "b")
		assert.Equal(t, 1, b.Relisted)
		assert.Equal(t, 2, b.Attempts)
		assert.Equal(t, 1, b.Pass, "the pass that first listed it")
		var flaws []string
		for _, e := range rep.Entries {
			if e.Outcome == pause.Failed {
				flaws = append(flaws, e.Error)
			}
		}
		require.Len(t, flaws, 3, "%+v", rep.Entries)
		assert.Contains(t, flaws[0], "listing 1, element 4: panicked: priority not ready")
		assert.Contains(t, flaws[1], `listing 2, element 2: ID "b" more than once`)
		assert.Contains(t, flaws[2], `listing 2, element 3: ID "e" more than once`)
		assert.Len(t, rep.Entries, 9)
	})
}

// scripted is a Lister that returns its listings one per call, and the
// last one again once they are used up.
type scripted struct {
	listings [][]pause.Sandbox
	n        int
}

func (s *scripted) List(context.Context) ([]pause.Sandbox, error) {
	l := s.listings[min(s.n, len(s.listings)-1)]
	s.n++
	return l, nil
}

// recorder is a sandbox whose Preserve records its ID.
type recorder struct {
	id   string
	mu   *sync.Mutex
	done map[string]int
}

func (s recorder) ID() string { return s.id }
func (s recorder) Preserve(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done[s.id]++
	return nil
}

// The slice a Lister returns is the Lister's once List has returned: a
// server that lists from a slice it reuses, and overwrites while the
// pass preserves (a sandbox that stopped, another one in its place),
// still gets every sandbox of the listing preserved once, and no other.
func TestListerMayReuseItsSliceDuringThePass(t *testing.T) {
	var mu sync.Mutex
	done := map[string]int{}
	list := make([]pause.Sandbox, 50)
	for i := range list {
		list[i] = recorder{id: fmt.Sprintf("sb-%02d", i), mu: &mu, done: done}
	}
	lists := 0
	lister := pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
		lists++
		if lists > 1 {
			return nil, nil
		}
		return list, nil
	})
	p, err := pause.New(lister, pause.Config{Limit: 1})
	require.NoError(t, err)
	// The first Preserve overwrites the listing's slice, as a server
	// reusing it would, before any other sandbox starts (limit 1).
	first := list[0].(recorder)
	list[0] = preserveFunc{id: first.id, f: func() {
		first.Preserve(context.Background())
		for i := range list {
			list[i] = recorder{id: fmt.Sprintf("other-%02d", i), mu: &mu, done: done}
		}
	}}
	rep := p.Run(context.Background(), time.Time{})
	require.NoError(t, rep.Err())
	assert.Equal(t, 50, rep.Counts[pause.Preserved])
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, done, 50, "the sandboxes listed, and no other")
	for id, n := range done {
		assert.Equal(t, 1, n, id)
		assert.True(t, strings.HasPrefix(id, "sb-"), id)
	}
}

// preserveFunc is a sandbox whose Preserve calls f.
type preserveFunc struct {
	id string
	f  func()
}

func (s preserveFunc) ID() string                     { return s.id }
func (s preserveFunc) Preserve(context.Context) error { s.f(); return nil }

// Fault: a Run given no time (its context's deadline already past, as
// for a preserve window the plan left empty, or its context cancelled)
// called the Lister in a goroutine and abandoned it at once, and its
// Report blamed the Lister: "pause: Lister had not returned by the phase
// deadline; abandoned", in 200 of 200 Runs over a Lister that answers at
// once (outside a bubble; inside one, the Lister's own ctx error when its
// goroutine ran first); drain copied it into every sandbox's entry. An
// operator would debug a Lister that was never given a chance. The Report
// is still Unknown (nothing was listed); its error now says why.
// docs/faults.md row 421.
func TestRunWithNoTimeLeftDoesNotBlameTheLister(t *testing.T) {
	for name, tc := range map[string]struct {
		ctx  func(context.Context) (context.Context, context.CancelFunc)
		want string
	}{
		"deadline past": {func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithDeadline(ctx, time.Now().Add(-time.Second))
		}, "context deadline exceeded"},
		"cancelled": {func(ctx context.Context) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			cancel()
			return ctx, cancel
		}, "context canceled"},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				node := fakesandbox.NewNode()
				node.AddN("sb", 3, time.Second)
				p, err := pause.New(node, pause.Config{})
				require.NoError(t, err)
				ctx, cancel := tc.ctx(t.Context())
				defer cancel()
				start := time.Now()
				rep := p.Run(ctx, start.Add(time.Minute))
				assert.Equal(t, start, rep.End, "at once")
				assert.True(t, rep.Unknown, "nothing was listed")
				assert.Equal(t, "pause: Run's context had ended before the Lister was called, no time to list: "+tc.want, rep.ListErr)
				assert.NotContains(t, rep.Err().Error(), "Lister had not returned")
			})
		})
	}
}

// A paginated Lister whose first page answers and whose second fails,
// every time, returns the sandboxes it listed with the error. They are
// preserved like any listed ones, and the listing still counts as failed:
//
//	0 s   list: [sb-0 sb-1], "page 2: 503"  -> preserve sb-0, sb-1
//	1 s   list: [sb-2],      "page 2: 503"  -> preserve sb-2
//	2 s   list: [],          "page 2: 503"  -> retried, 1 s apart, until 10 s
//	10 s  Report: 3 preserved, not Unknown but Incomplete, Err names the 503
//
// The sandboxes a Run knows of are never thrown away for an error that
// came with them, as an io.Reader's caller processes the n > 0 bytes
// before the error.
func TestSandboxesListedWithAnErrorArePreserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		sbs := node.AddN("sb", 3, time.Second)
		lists := 0
		paged := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			lists++
			running, err := node.List(ctx)
			if err != nil {
				return nil, err
			}
			return running[:min(2, len(running))], errors.New("page 2: 503 Service Unavailable")
		})
		p, err := pause.New(paged, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, 10*time.Second, 0)
		for _, sb := range sbs {
			assert.True(t, sb.Preserved(), "%s was listed, and preserved", sb.Name)
		}
		assert.Equal(t, 3, rep.Counts[pause.Preserved])
		assert.Len(t, rep.Entries, 3)
		assert.False(t, rep.Unknown, "listings gave sandboxes")
		assert.True(t, rep.Incomplete, "no listing was complete")
		assert.Contains(t, rep.ListErr, "page 2: 503")
		require.Error(t, rep.Err(), "the node may have more sandboxes than listed")
		assert.Contains(t, rep.Err().Error(), "may have sandboxes")
		assert.Contains(t, rep.Err().Error(), "page 2: 503")
		assert.Greater(t, lists, 4, "the failed listing was retried until the deadline")
	})
}

//	0 s        list: [sb-0 sb-1 sb-2], "page 2: 503"  -> preserved at once
//	0 s on     list: what the server lists, "page 2: 503", each listing
//	           1 ms; the policy (backoff.ZeroBackOff, a custom one that
//	           never ends) asks for no wait before the next
//	10 s       the phase deadline: Report Incomplete, Err names the 503
//
// Before, the Run listed again at once, to the phase deadline: 10,000
// listings of the server in 10 s here, with a listing of no time a CPU
// spin (435,625 listings in 3 s measured, each logged at Error). Listings
// are now at least 100 ms apart, whatever the policy.
func TestListingsFailingAfterSomeWaitBetweenThemWhateverThePolicy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		again bool // the server lists the preserved sandboxes too (a listing that lags)
	}{
		{name: "the failed listing lists nothing more"},
		{name: "the failed listing lists the preserved again", again: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				node := fakesandbox.NewNode()
				sbs := node.AddN("sb", 3, 0)
				lists := 0
				paged := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
					lists++
					time.Sleep(time.Millisecond)
					running, err := node.List(ctx)
					if err != nil {
						return nil, err
					}
					if tc.again {
						running = running[:0]
						for _, sb := range sbs {
							running = append(running, sb)
						}
					}
					return running, errors.New("page 2: 503 Service Unavailable")
				})
				p, err := pause.New(paged, pause.Config{BackOff: func() backoff.BackOff { return &backoff.ZeroBackOff{} }})
				require.NoError(t, err)
				rep, took := runFor(t, p, 10*time.Second, 0)
				assert.LessOrEqual(t, took, 10*time.Second, "Run returns by its phase deadline")
				assert.Equal(t, 3, rep.Counts[pause.Preserved], "%v %+v", rep.Counts, rep.Entries)
				assert.True(t, rep.Incomplete, "no listing was complete")
				assert.Contains(t, rep.ListErr, "page 2: 503")
				assert.Greater(t, lists, 2, "the failed listing was retried")
				assert.LessOrEqual(t, lists, 1+int(10*time.Second/(100*time.Millisecond)), "listings at least 100 ms apart")
			})
		})
	}
}

// An ID a listing has twice is a flaw whichever pass first listed it: the
// second element may be another sandbox under the same ID, which no
// preserve reaches, so it gets a Failed entry (and Err says so), as a new
// ID listed twice does. A sandbox preserved in pass 1 (a), and one lost
// there (f), each listed twice by pass 2, were merged silently: a's Run
// reported everything preserved, Err nil. The listing after with the same
// repeats adds no entry (the flaw was reported).
func TestIDListedTwiceAfterAnEarlierPassIsAFlaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &fakesandbox.Sandbox{Name: "a", Latency: time.Second}
		f := &fakesandbox.Sandbox{Name: "f", Latency: time.Second, Faults: []fakesandbox.Fault{fakesandbox.Permanent}}
		lister := &scripted{listings: [][]pause.Sandbox{{a}, {a, a}, {a, a}, {}}}
		p, err := pause.New(lister, pause.Config{})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		require.Len(t, rep.Entries, 2, "%+v", rep.Entries)
		assert.Equal(t, pause.Preserved, rep.Entries[0].Outcome)
		assert.Equal(t, 2, rep.Entries[0].Relisted, "preserved again by passes 2 and 3, once each")
		assert.Equal(t, pause.Failed, rep.Entries[1].Outcome)
		assert.Contains(t, rep.Entries[1].Error, `listing 2, element 1: ID "a" more than once`)
		assert.Equal(t, 0, rep.Entries[1].Attempts)
		assert.Error(t, rep.Err(), "an element no preserve reached")
		assert.Equal(t, 3, a.Attempts())

		*lister = scripted{listings: [][]pause.Sandbox{{f}, {f, f}, {}}}
		rep, _ = runFor(t, p, time.Minute, 0)
		require.Len(t, rep.Entries, 2, "%+v", rep.Entries)
		assert.Equal(t, pause.Failed, rep.Entries[0].Outcome)
		assert.Equal(t, 1, rep.Entries[0].Attempts, "lost already: not preserved again")
		assert.Contains(t, rep.Entries[1].Error, `listing 2, element 1: ID "f" more than once`)
		assert.Equal(t, 2, rep.Counts[pause.Failed])
	})
}

// alwaysPanics is a sandbox whose Priority panics whenever it is asked,
// with the same value as every other one's.
type alwaysPanics struct{ *fakesandbox.Sandbox }

func (alwaysPanics) Priority() int { panic("priority not ready") }

// A sandbox whose Priority (or Estimate, or Size) panics is a flawed
// element with an ID, and the Report has an entry for it whatever other
// sandbox panicked the same way in an earlier listing: a flaw is told from
// an earlier listing's by the ID it carries. x panicking in listing 1 and
// y the same way in listing 2 gave one entry, x's: y was in no entry, and
// Err counted 1 sandbox not preserved of 2, where 2 of 3 were not.
func TestSandboxPanickingAsAnotherDidInAnEarlierListingHasAnEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &fakesandbox.Sandbox{Name: "g", Latency: time.Second}
		x := alwaysPanics{&fakesandbox.Sandbox{Name: "x", Latency: time.Second}}
		y := alwaysPanics{&fakesandbox.Sandbox{Name: "y", Latency: time.Second}}
		p, err := pause.New(&scripted{listings: [][]pause.Sandbox{{g, x}, {y, x}, {y, x}, {}}}, pause.Config{})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		require.Len(t, rep.Entries, 3, "%+v", rep.Entries)
		assert.Equal(t, "g", rep.Entries[0].ID)
		for i, id := range []string{"x", "y"} {
			e := rep.Entries[i+1]
			assert.Equal(t, id, e.ID)
			assert.Equal(t, pause.Failed, e.Outcome)
			assert.Contains(t, e.Error, "panicked: priority not ready")
			assert.NotEmpty(t, e.Stack)
		}
		assert.Equal(t, 2, rep.Lost())
		assert.EqualError(t, rep.Err(), "pause: 2 of 3 sandboxes not preserved")
		assert.Equal(t, 1, g.Attempts())
	})
}

// hangingLister lists node, except that its call number hung blocks until
// its context ends (a call hung on a half-open connection); a sandbox
// "late" joins the node at the second call (it turned running during the
// first pass).
type hangingLister struct {
	node  *fakesandbox.Node
	hung  int32
	calls atomic.Int32
}

func (l *hangingLister) List(ctx context.Context) ([]pause.Sandbox, error) {
	n := l.calls.Add(1)
	if n == 2 {
		l.node.AddN("late", 1, time.Second)
	}
	if n == l.hung {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return l.node.List(ctx)
}

// A listing call hung on a half-open connection, bounded by the phase
// deadline alone, held its pass to it: a first listing's sandboxes were
// never preserved, and those a relisting would have found were not even
// in the Report, whose Err said nothing. A call that has not answered in
// half the time left gets a second one beside it; the first answer wins.
//
//	20 x 1 s, a minute's phase, 70 s hard
//	first call hung:  before, Unknown at 60 s, 0 preserved; now 21 by 32 s
//	second call hung: before, 20 preserved at 60 s, "late" unaccounted; now 21 by 32 s
func TestAListingHungOnOneCallIsMadeAgainBesideIt(t *testing.T) {
	for _, hung := range []int32{1, 2} {
		synctest.Test(t, func(t *testing.T) {
			node := fakesandbox.NewNode()
			node.AddN("sb", 20, time.Second)
			l := &hangingLister{node: node, hung: hung}
			var logs bytes.Buffer
			p, err := pause.New(l, pause.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			rep, took := runFor(t, p, time.Minute, 70*time.Second)
			assert.Equal(t, 21, rep.Counts[pause.Preserved], "call %d hung", hung)
			assert.Equal(t, 1, len(rep.Entries)-20, "late accounted for")
			assert.NoError(t, rep.Err())
			assert.Less(t, took, 33*time.Second, "the pass was not held to the phase deadline")
			assert.Contains(t, rep.ListErr, "the one made beside it answered")
			assert.Contains(t, logs.String(), "listing again beside it")
		})
	}
}

// A slow listing that answers after the second call was made beside it is
// taken as it comes: the second call is no deadline for the first.
func TestASlowListingAnsweringAfterItsHedgeIsTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 20, time.Second)
		p, err := pause.New(pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			select { // each call: 40 s of a minute
			case <-time.After(40 * time.Second):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return node.List(ctx)
		}), pause.Config{})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 70*time.Second)
		assert.Equal(t, 20, rep.Counts[pause.Preserved])
		assert.False(t, rep.Unknown)
		assert.NotContains(t, rep.ListErr, "beside it", "the first call answered")
	})
}

// The second call of a listing comes at half the time left to the phase
// deadline as it stands: a Tighten that moves the deadline during the
// call moves the second call with it. Kept at the half of the time the
// call began with, it came past the new deadline, and the hung call held
// the pass there.
//
//	20 x 1 s, a minute's phase, the first call hung; at 5 s, Tighten to 20 s
//	before: no second call, nothing preserved, Unknown at 20 s
//	after:  a second call at 10 s, 21 preserved by 13 s (with "late", which it lists)
func TestASecondListingCallFollowsATighten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 20, time.Second)
		l := &hangingLister{node: node, hung: 1}
		p, err := pause.New(l, pause.Config{})
		require.NoError(t, err)
		start := time.Now()
		time.AfterFunc(5*time.Second, func() { assert.True(t, p.Tighten(start.Add(20*time.Second))) })
		rep, took := runFor(t, p, time.Minute, 0)
		assert.Equal(t, 21, rep.Counts[pause.Preserved])
		assert.False(t, rep.Unknown)
		assert.Contains(t, rep.ListErr, "after 10s,")
		assert.Less(t, took, 14*time.Second)
	})
}

// The call hung on a half-open connection fails once the kernel gives the
// connection up (a reset, its user timeout), after the second call was made
// beside it and while that one still runs. Fault: the first answer was
// taken, the error too: the second call's listing, 5 s from answering, was
// dropped, and a third call made after a backoff wait, taking its 15 s from
// there. An error now waits for the call beside it; only both failing fail
// the listing.
//
//	a minute's phase; every call 15 s but the first, which fails at 40 s
//	before: the first preserve at 55.2 s (a backoff wait, then the third call's 15 s); after: at 45 s (the second call's)
func TestAListingCallThatFailsWaitsForTheCallBesideIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 4, time.Second)
		var calls atomic.Int32
		start := time.Now()
		p, err := pause.New(pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			took, err := 15*time.Second, error(nil)
			if calls.Add(1) == 1 {
				took, err = 40*time.Second, errors.New("read tcp: connection reset by peer")
			}
			select {
			case <-time.After(took):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if err != nil {
				return nil, err
			}
			return node.List(ctx)
		}), pause.Config{})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 70*time.Second)
		assert.Equal(t, 4, rep.Counts[pause.Preserved])
		first := rep.Entries[0].Start
		for _, e := range rep.Entries {
			first = earliestTime(first, e.Start)
		}
		assert.Equal(t, start.Add(45*time.Second), first, "the second call's listing, 45 s in")
	})
}

func earliestTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// A listing made again after one that failed, and cut by the phase's end
// (the server slow to answer under load), said only that it was cut: the
// Report's ListErr, its Err and a caller's note read "context deadline
// exceeded" and lost the 503 that made the Run list again (a cold CI run's
// supervisor sweep, examples/supervisor TestFinalSweepPausesWhatItsPartialListingListed).
// It keeps the failure before the cut, in both places a listing is made
// again:
//
//	again after a pass   0 s list: [sb-0 sb-1], "page 2: 503" -> preserved;
//	                     then every call answers only at the phase's end
//	again in a pass      0 s list: "503"; then every call as above
//	10 s                 the phase deadline: ListErr names the 503 and the cut
func TestAListingCutByThePhaseEndKeepsTheFailureBeforeIt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		partial bool // the first call lists sandboxes with its error
	}{
		{name: "again after a pass", partial: true},
		{name: "again in a pass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				node := fakesandbox.NewNode()
				node.AddN("sb", 2, time.Second)
				var calls atomic.Int32
				slow := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
					if calls.Add(1) > 1 {
						<-ctx.Done()
						return nil, fmt.Errorf("no answer before its context ended: %w", ctx.Err())
					}
					if !tc.partial {
						return nil, errors.New("page 1: 503 Service Unavailable")
					}
					running, _ := node.List(ctx)
					return running, errors.New("page 2: 503 Service Unavailable")
				})
				p, err := pause.New(slow, pause.Config{BackOff: constant(time.Second)})
				require.NoError(t, err)
				rep, _ := runFor(t, p, 10*time.Second, 0)
				assert.Greater(t, calls.Load(), int32(1), "listed again")
				assert.Contains(t, rep.ListErr, "503", "the failure that made the Run list again")
				assert.Regexp(t, "context deadline exceeded|abandoned", rep.ListErr, "and the cut")
				require.Error(t, rep.Err())
				assert.Contains(t, rep.Err().Error(), "503")
				if tc.partial {
					assert.Equal(t, 2, rep.Counts[pause.Preserved])
					assert.True(t, rep.Incomplete)
				} else {
					assert.True(t, rep.Unknown)
				}
			})
		})
	}
}

// A listing made again after one that failed, whose answer (the node has
// no sandboxes) comes in as the Run's context ends (a drain forced as the
// server answers), is taken, or abandoned if the Run's wait saw the end
// first; either way the Report says which. Row 1710's naming of the
// failure before a cut listing took the empty answer, with no error, for
// a cut one: "%!w(<nil>); the listing before failed: ...", Unknown.
//
//	0 s   listing: 503
//	1 s   listing again (back-off 1 s): "none", as the Run is forced
//	1 s   Report: the listing succeeded (or was abandoned after the 503)
func TestAnEmptyListingAnsweredAsTheRunEndsAfterAFailureSucceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, force := context.WithTimeout(t.Context(), 10*time.Second)
		defer force()
		var calls atomic.Int32
		lister := pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			if calls.Add(1) == 1 {
				return nil, errors.New("list: 503 Service Unavailable")
			}
			force()
			return nil, nil
		})
		p, err := pause.New(lister, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		start := time.Now()
		rep := p.Run(ctx, time.Time{})
		assert.Equal(t, time.Second, time.Since(start))
		assert.Equal(t, int32(2), calls.Load(), "listed again")
		assert.NotContains(t, rep.ListErr, "%!")
		assert.Empty(t, rep.Entries)
		if rep.Unknown { // the Run's wait saw the force before the answer
			assert.Contains(t, rep.ListErr, "abandoned; the listing before failed: list: 503")
			return
		}
		assert.Empty(t, rep.ListErr, "the listing succeeded: the node has no sandboxes")
		assert.NoError(t, rep.Err())
	})
}

// A Run given no deadline that a Tighten then gives one returns by it,
// as Tighten says, though its listing ignores its context: the listing is
// abandoned at the deadline, as in a Run that had one from its start.
// Called at once with no deadline to keep to, the listing held Run until
// it returned.
//
//	0 s   Run, no deadline; the listing ignores its context (an hour)
//	5 s   Tighten(10 s)
//	10 s  the listing abandoned; Run returns, its sandboxes unknown (was: 1 h)
func TestATightenBoundsTheListingOfARunGivenNoDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			time.Sleep(time.Hour)
			return nil, nil
		})
		p, err := pause.New(hung, pause.Config{})
		require.NoError(t, err)
		start := time.Now()
		time.AfterFunc(5*time.Second, func() { assert.True(t, p.Tighten(start.Add(10*time.Second))) })
		rep := p.Run(context.Background(), time.Time{})
		assert.Equal(t, 10*time.Second, time.Since(start))
		assert.True(t, rep.Unknown)
		assert.Contains(t, rep.ListErr, "abandoned")
		assert.Equal(t, start.Add(10*time.Second), rep.Hard)
		time.Sleep(time.Hour) // the listing returns
	})
}

// A Lister that ends its goroutine (runtime.Goexit: t.FailNow in a test's
// Lister, a library that does) has failed its listing, as one that panics
// has: the Run retries it, and the Report and an Error line say why. Its
// call never answered: the Run waited for the second call made beside it,
// at half the time left to the phase deadline, or, every call ending so,
// to the deadline itself (to the end of time with none).
//
//	2 x 1 s, a minute's phase, 1 s between listings; the first call exits
//	before: listed at 30 s (the call beside it), 2 preserved by 31 s
//	now:    listed again at 1 s, 2 preserved by 2 s
//	every call exits: before, abandoned at 60 s; now "runtime.Goexit" in ListErr
func TestAListerThatEndsItsGoroutineFailsItsListing(t *testing.T) {
	for _, hard := range []time.Duration{0, 70 * time.Second} {
		synctest.Test(t, func(t *testing.T) {
			node := fakesandbox.NewNode()
			node.AddN("sb", 2, time.Second)
			calls := 0
			var logs bytes.Buffer
			p, err := pause.New(pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
				if calls++; calls == 1 {
					runtime.Goexit()
				}
				return node.List(ctx)
			}), pause.Config{BackOff: constant(time.Second), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			rep, took := runFor(t, p, time.Minute, hard)
			assert.Equal(t, 2, rep.Counts[pause.Preserved], "hard %v", hard)
			assert.NoError(t, rep.Err())
			assert.Equal(t, 2*time.Second, took, "listed again after the backoff's second")
			assert.Contains(t, logs.String(), "runtime.Goexit")

			p, err = pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
				runtime.Goexit()
				return nil, nil
			}), pause.Config{BackOff: constant(time.Second)})
			require.NoError(t, err)
			rep, _ = runFor(t, p, time.Minute, hard)
			assert.True(t, rep.Unknown)
			assert.Contains(t, rep.ListErr, "runtime.Goexit")
		})
	}
}

// What a Run leaves to the next Run of its Preserver (its semaphore, its
// listing's answers) is left only when nothing the Run left behind can
// still reach it: a Preserve abandoned at the hard deadline keeps its
// slot, and a listing's calls that never answered may answer into the
// next Run's listing. Either taken, the next Run was held or misled.
//
//	Limit 1.
//	0 s   Run A (10 s phase, 20 s hard) lists hung, whose Preserve ignores
//	      its context: abandoned at 20 s, its slot held
//	30 s  Run B (10 s phase) lists a: preserved by 31 s in the one slot;
//	      its listing again ignores its context (and the one beside it):
//	      abandoned at 40 s, their answers, x, due at 45 and 46 s
//	40 s  Run C lists b at 50 s: preserved by 51 s; x in no entry
func TestARunTakesNothingTheRunBeforeLeftInUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := &fakesandbox.Sandbox{Name: "hung", HangFor: time.Hour, Faults: []fakesandbox.Fault{fakesandbox.Hang}}
		a := &fakesandbox.Sandbox{Name: "a", Latency: time.Second}
		b := &fakesandbox.Sandbox{Name: "b", Latency: time.Second}
		x := &fakesandbox.Sandbox{Name: "x", Latency: time.Second}
		t0 := time.Now()
		at := func(d time.Duration) { time.Sleep(time.Until(t0.Add(d))) }
		var calls atomic.Int32 // Run B's calls run side by side
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			switch call := calls.Add(1); call {
			case 1: // Run A
				return []pause.Sandbox{hung}, nil
			case 2: // Run B
				return []pause.Sandbox{a}, nil
			case 3, 4: // Run B's listing again, and the call beside it
				at(44*time.Second + time.Duration(call)*time.Second)
				return []pause.Sandbox{x}, nil
			case 5: // Run C
				at(50 * time.Second)
				return []pause.Sandbox{b}, nil
			}
			return nil, nil
		}), pause.Config{Limit: 1})
		require.NoError(t, err)

		rep, _ := runFor(t, p, 10*time.Second, 20*time.Second)
		require.Equal(t, 1, rep.Counts[pause.TimedOut], "hung abandoned")
		at(30 * time.Second)
		rep, took := runFor(t, p, 10*time.Second, 0)
		assert.Equal(t, 10*time.Second, took)
		assert.Equal(t, 1, rep.Counts[pause.Preserved], "a, in the slot hung's worker holds no more")
		assert.Contains(t, rep.ListErr, "abandoned")

		rep, took = runFor(t, p, time.Minute, 0)
		assert.Equal(t, 11*time.Second, took, "listed at 50 s, b preserved by 51 s")
		require.Len(t, rep.Entries, 1, "the calls Run B abandoned answered into no listing of Run C")
		assert.Equal(t, "b", rep.Entries[0].ID)
		assert.Equal(t, pause.Preserved, rep.Entries[0].Outcome)
		time.Sleep(time.Hour) // hung returns
	})
}
