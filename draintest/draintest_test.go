package draintest_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/pause"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The package documentation's recipe, line for line (internal/doccheck holds them equal).
func TestShutdownPreservesEverySandboxBeforeSIGKILL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := draintest.NewNode()
		node.AddN("sb", 40, 2*time.Second) // 40 sandboxes, 2 s per preserve
		node.Add(&draintest.Sandbox{Name: "flaky", Latency: time.Second,
			Faults: []draintest.Fault{draintest.Transient}})
		budget, err := deadline.New(60*time.Second, deadline.Config{}) // the pod's grace period
		require.NoError(t, err)
		d, err := drain.New(drain.Config{Budget: budget, Sandboxes: node,
			Pause: pause.Config{Limit: 8}})
		require.NoError(t, err)

		sigs := make(chan os.Signal, 1)
		reports := make(chan *drain.Report, 1)
		go func() { reports <- d.ServeSignals(t.Context(), sigs) }()
		start := time.Now()
		sigs <- syscall.SIGTERM // the kubelet's SIGTERM
		rep := <-reports

		require.NoError(t, rep.Err())
		assert.Equal(t, 41, rep.Preserve.Counts[pause.Preserved])
		// 40 x 2 s at 8 at a time is 10 s of virtual time; the retry adds a jittered backoff.
		assert.Less(t, time.Since(start), 15*time.Second)
		assert.Greater(t, rep.Headroom, time.Duration(0)) // before SIGKILL
	})
}

// The preStop hook under synctest, as the kubelet runs it: the wait holds
// while sandboxes run, until the drain deadline leaves the preserve phase
// its reserve; the hook call returns, the kubelet sends SIGTERM, and the
// shutdown preserves what is left. (A SIGTERM while the call is still open
// would mean the kubelet's grace ran out: SIGKILL 2 s later.)
//
//	T0 preStop: gate closed, 4 sandboxes run ... T0+103 s drain deadline
//	(120 s grace - 5 s margin - the sandboxes' own 3 s estimates, which the
//	reserve counts on before the Estimator's 4 s, one at a time: no
//	parallelism was measured yet): the call returns 0.3 s before it, the
//	time the kubelet may take to send SIGTERM; SIGTERM; the 4 preserved by
//	T0+106 s (8 at once to start with); SIGKILL due T0+120 s
func TestRecipeWithThePreStopHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := draintest.NewNode()
		node.AddN("sb", 4, 3*time.Second)
		budget, err := deadline.New(120*time.Second, deadline.Config{})
		require.NoError(t, err)
		d, err := drain.New(drain.Config{Budget: budget, Sandboxes: node,
			Pause: pause.Config{Estimator: deadline.NewEstimator(4 * time.Second)}})
		require.NoError(t, err)

		t0 := time.Now()
		hook := httptest.NewRecorder()
		hookDone := make(chan struct{})
		go func() {
			defer close(hookDone)
			d.PreStop().ServeHTTP(hook, httptest.NewRequest(http.MethodGet, "/drain", nil))
		}()
		time.Sleep(30 * time.Second) // the sandboxes keep running; the hook still waits
		synctest.Wait()
		assert.True(t, d.Gate().Closed(), "the preStop call closed the gate")
		select {
		case <-hookDone:
			t.Fatal("the preStop wait ended while sandboxes ran and time was left")
		default:
		}
		<-hookDone
		assert.Equal(t, 103*time.Second-300*time.Millisecond, time.Since(t0), "the wait ended 0.3 s before the drain deadline")

		sigs := make(chan os.Signal, 1)
		reports := make(chan *drain.Report, 1)
		go func() { reports <- d.ServeSignals(t.Context(), sigs) }()
		sigs <- syscall.SIGTERM // the kubelet's, once the hook call returned
		rep := <-reports
		require.NoError(t, rep.Err())
		assert.Equal(t, 4, rep.Preserve.Counts[pause.Preserved])
		assert.Equal(t, "deadline", rep.PreStop.Reason)
		assert.Positive(t, rep.Headroom)
	})
}

func TestScriptedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sb := &draintest.Sandbox{Name: "x", Latency: time.Second, Faults: []draintest.Fault{
			draintest.Transient, draintest.Permanent, draintest.Plain}}
		ctx := t.Context()
		start := time.Now()
		assert.ErrorIs(t, sb.Preserve(ctx), draintest.ErrTransient)
		err := sb.Preserve(ctx)
		var perm *backoff.PermanentError
		assert.ErrorAs(t, err, &perm)
		assert.ErrorIs(t, err, draintest.ErrPermanent)
		err = sb.Preserve(ctx)
		assert.ErrorIs(t, err, draintest.ErrPermanent)
		assert.False(t, errors.As(err, &perm))
		assert.False(t, sb.Preserved())
		require.NoError(t, sb.Preserve(ctx))
		assert.True(t, sb.Preserved())
		assert.Equal(t, 4, sb.Attempts())
		assert.Equal(t, 4*time.Second, time.Since(start))
		assert.Len(t, sb.Starts(), 4)
	})
}

func TestPreserveHonoursContextButHangDoesNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		slow := &draintest.Sandbox{Name: "slow", Latency: time.Minute}
		assert.ErrorIs(t, slow.Preserve(ctx), context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))
		hang := &draintest.Sandbox{Name: "hang", HangFor: time.Hour, Faults: []draintest.Fault{draintest.Hang}}
		assert.ErrorIs(t, hang.Preserve(ctx), draintest.ErrHung)
		assert.Equal(t, time.Hour+time.Second, time.Since(start))
	})
}

func TestPanicAndVanish(t *testing.T) {
	node := draintest.NewNode()
	sbs := node.Add(&draintest.Sandbox{Name: "p", Faults: []draintest.Fault{draintest.Panic}},
		&draintest.Sandbox{Name: "v", Faults: []draintest.Fault{draintest.Vanish}})
	assert.PanicsWithValue(t, "draintest: injected panic", func() { _ = sbs[0].Preserve(t.Context()) })
	assert.ErrorIs(t, sbs[1].Preserve(t.Context()), pause.ErrGone)
	list, err := node.List(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1, "the vanished one is no longer listed")
	assert.Equal(t, "p", list[0].ID())
}

func TestNodeListsWhatNeedsPreservingAndCountsConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := draintest.NewNode()
		sbs := node.AddN("sb", 3, time.Second)
		var hooks []int
		node.OnList = func(n int) { hooks = append(hooks, n) }
		for _, sb := range sbs[:2] {
			go func() { _ = sb.Preserve(t.Context()) }()
		}
		synctest.Wait()
		assert.Equal(t, 2, node.InFlight())
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 0, node.InFlight())
		assert.Equal(t, 2, node.MaxInFlight())
		node.Remove("sb-2")
		list, err := node.List(t.Context())
		require.NoError(t, err)
		assert.Empty(t, list)
		assert.Equal(t, []int{1}, hooks)
		assert.Len(t, node.Sandboxes(), 3)
		assert.Equal(t, 1, node.Lists())
	})
}

func TestNodeListingFaults(t *testing.T) {
	node := draintest.NewNode()
	node.AddN("sb", 1, 0)
	boom := errors.New("boom")
	node.ListErr = func(n int) error {
		if n == 1 {
			return boom
		}
		return nil
	}
	_, err := node.List(t.Context())
	require.ErrorIs(t, err, boom)
	list, err := node.List(t.Context())
	require.NoError(t, err)
	assert.Len(t, list, 1, "the second listing succeeds")
}

func TestZeroNodeIsReady(t *testing.T) {
	var node draintest.Node
	node.AddN("sb", 2, 0)
	node.Remove("sb-0")
	list, err := node.List(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "sb-1", list[0].ID())
}

// Two writers share a Disk's bandwidth: each takes twice as long as one
// alone.
func TestDiskSharesItsBandwidth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const mib = 1 << 20
		disk := &draintest.Disk{Bandwidth: 2 * mib}
		alone := &draintest.Sandbox{Name: "alone", Bytes: mib, Disk: disk}
		start := time.Now()
		require.NoError(t, alone.Preserve(t.Context()))
		assert.Equal(t, 500*time.Millisecond, time.Since(start).Round(time.Millisecond))

		assert.Equal(t, time.Second, writeTwo(t, disk, mib))
	})
}

// A Disk whose Bandwidth was left out, or set to something no device has, fails the
// preserve with an error naming the field, and a write longer than the largest Duration
// takes forever (until ctx ends): both wrote instantly and succeeded, so a concurrency
// test over a misconfigured Disk passed without measuring anything.
func TestDiskBadFieldsAreNamedNotInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const mib = 1 << 20
		for field, disk := range map[string]*draintest.Disk{
			"Disk.Bandwidth": {PerWriter: mib},
			"Disk.PerWriter": {Bandwidth: mib, PerWriter: -1},
			"Disk.Thrash":    {Bandwidth: mib, Thrash: math.NaN()},
			"Disk.Jitter":    {Bandwidth: mib, Jitter: math.Inf(1)},
		} {
			start := time.Now()
			err := (&draintest.Sandbox{Name: "sb", Bytes: mib, Disk: disk}).Preserve(t.Context())
			require.Error(t, err, field)
			assert.Contains(t, err.Error(), field)
			assert.Zero(t, time.Since(start), field)
		}
		err := (&draintest.Sandbox{Name: "sb", Bytes: -1, Disk: &draintest.Disk{Bandwidth: mib}}).Preserve(t.Context())
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Sandbox.Bytes")

		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		start := time.Now()
		huge := &draintest.Sandbox{Name: "huge", Bytes: math.MaxInt64, Disk: &draintest.Disk{Bandwidth: 1}}
		assert.ErrorIs(t, huge.Preserve(ctx), context.DeadlineExceeded, "292 years of writing is not done at once")
		assert.Equal(t, time.Hour, time.Since(start))
		assert.False(t, huge.Preserved())
	})
}

// A sandbox its user deletes while the drain runs (Node.Remove), after the
// pass's listing took it, is gone when its turn comes: its Preserve
// returns pause.ErrGone, as pause.Sandbox asks of one that no longer
// exists, and the Report counts it vanished. Before, the fake preserved
// the deleted sandbox and the Report counted it preserved.
//
//	0 s  pass 1 lists sb-0, sb-1, sb-2 (limit 1, 1 s each)
//	0.5 s sb-2 is deleted; 2 s its turn: gone
func TestSandboxRemovedAfterItsListingIsGoneNotPreserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := draintest.NewNode()
		sbs := node.AddN("sb", 3, time.Second)
		p, err := pause.New(node, pause.Config{Limit: 1})
		require.NoError(t, err)
		go func() {
			time.Sleep(500 * time.Millisecond)
			node.Remove("sb-2")
		}()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		rep := p.Run(ctx, time.Time{})
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		assert.Equal(t, 1, rep.Counts[pause.Vanished])
		assert.False(t, sbs[2].Preserved())
		assert.ErrorIs(t, sbs[2].Preserve(t.Context()), pause.ErrGone, "called by hand too")
	})
}

// Fault: Node.Remove kept the ID, not the sandbox, so a sandbox added
// after another of its ID was removed (its user deleted one and made
// another under the same name, as a server that names sandboxes after
// their user's session does; or a test putting back the one it removed)
// was never listed and its Preserve returned pause.ErrGone: the test world
// lost it in silence, a Run never saw it and its Report had no entry. The
// removal is of the sandboxes on the node at the time; one added since is
// listed and preserved, and the one removed stays gone.
func TestSandboxAddedAgainAfterItsIDWasRemovedIsListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := draintest.NewNode()
		old := node.AddN("sb", 2, time.Second)
		node.Remove("sb-1")
		again := node.Add(&draintest.Sandbox{Name: "sb-1", Latency: time.Second})[0]

		list, err := node.List(t.Context())
		require.NoError(t, err)
		require.Len(t, list, 2, "sb-0 and the new sb-1")
		assert.Same(t, again, list[1])
		assert.ErrorIs(t, old[1].Preserve(t.Context()), pause.ErrGone, "the removed one stays gone")

		p, err := pause.New(node, pause.Config{Limit: 2})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		rep := p.Run(ctx, time.Time{})
		assert.Equal(t, 2, rep.Counts[pause.Preserved], "%+v", rep.Entries)
		assert.True(t, again.Preserved())

		// The same sandbox put back (a test undoing its Remove) is on the
		// node again, listed once.
		node.Remove("sb-0")
		node.Add(old[0])
		node.Remove("sb-1")
		node.Add(old[1])
		list, err = node.List(t.Context())
		require.NoError(t, err)
		require.Len(t, list, 1, "sb-0 was preserved; the old sb-1, never preserved, is back once")
		assert.Same(t, old[1], list[0])
		assert.NoError(t, old[1].Preserve(t.Context()))
	})
}

// A user's concurrency test over a Disk, its sandboxes made by AddN and given the Disk,
// Bytes forgotten: each preserve fails at once with an error naming Sandbox.Bytes, and
// the Report says so. Fault: a preserve wrote its Bytes, none, to the Disk in no time,
// so 16 preserves of 1 s at once on a disk that writes 4 at full speed took 1 s, as
// with no Disk, all preserved: the test passed measuring nothing. So did a Sandbox with
// a negative Latency (preserved at once), a negative HangFor (a Hang that returned at
// once) or a Fault outside the constants (taken for OK).
func TestSandboxFieldsNoSandboxHasAreNamedNotPassed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const mib = 1 << 20
		disk := &draintest.Disk{Bandwidth: 4 * mib, PerWriter: mib}
		node := draintest.NewNode()
		for _, sb := range node.AddN("sb", 16, time.Second) {
			sb.Disk = disk
		}
		p, err := pause.New(node, pause.Config{Limit: 16})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		rep := p.Run(ctx, time.Time{})
		assert.Zero(t, time.Since(start), "failed at once")
		assert.Equal(t, 16, rep.Counts[pause.Failed], "%v", rep.Counts)
		require.NotEmpty(t, rep.Entries)
		assert.Contains(t, rep.Entries[0].Error, "Sandbox.Bytes")
		assert.Contains(t, rep.Entries[0].Error, `"sb-0"`)

		for field, sb := range map[string]*draintest.Sandbox{
			"Sandbox.Latency":   {Name: "x", Latency: -time.Second},
			"Sandbox.HangFor":   {Name: "x", HangFor: -time.Second, Faults: []draintest.Fault{draintest.Hang}},
			"Sandbox.Faults[1]": {Name: "x", Faults: []draintest.Fault{draintest.OK, draintest.Vanish + 1}},
			"Sandbox.Bytes":     {Name: "x", Bytes: 0, Disk: disk},
		} {
			start := time.Now()
			err := sb.Preserve(t.Context())
			require.Error(t, err, field)
			assert.Contains(t, err.Error(), field)
			var perm *backoff.PermanentError
			assert.ErrorAs(t, err, &perm, "%s: no retry mends it", field)
			assert.Zero(t, time.Since(start), field)
			assert.False(t, sb.Preserved(), field)
			assert.Equal(t, 1, sb.Attempts(), field)
		}

		assert.PanicsWithValue(t, `draintest: Node.AddN("sb"): count must not be negative, got -1`, func() { node.AddN("sb", -1, 0) })
		before := len(node.Sandboxes())
		assert.PanicsWithValue(t, "draintest: Node.Add: sandbox 1 of 2 is nil", func() {
			node.Add(&draintest.Sandbox{Name: "ok"}, nil)
		})
		assert.Len(t, node.Sandboxes(), before, "none added")
	})
}

// A sandbox that vanished stays gone when a Lister of the test's own (the server's
// sandboxes not preserved, on no Node) lists it again: the Report counts it vanished, as
// the doc of Vanish says. Fault: on no Node, nothing remembered the Vanish, so the next
// pass's attempt ran the script on (OK) and preserved a sandbox that no longer existed:
// the Report said 2 preserved, where a real runtime's ErrGone leaves it vanished.
//
//	0 s  pass 1: a preserved (1 s), g vanishes; 1 s pass 2 lists g again: gone ...
func TestVanishedSandboxListedAgainStaysGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &draintest.Sandbox{Name: "a", Latency: time.Second}
		g := &draintest.Sandbox{Name: "g", Latency: time.Second, Faults: []draintest.Fault{draintest.Vanish}}
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			var out []pause.Sandbox
			for _, sb := range []*draintest.Sandbox{a, g} {
				if !sb.Preserved() {
					out = append(out, sb)
				}
			}
			return out, nil
		}), pause.Config{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		rep := p.Run(ctx, time.Time{})
		require.Len(t, rep.Entries, 2)
		assert.Equal(t, pause.Preserved, rep.Entries[0].Outcome, "a")
		assert.Equal(t, pause.Vanished, rep.Entries[1].Outcome, "g: %+v", rep.Entries[1])
		assert.Positive(t, rep.Entries[1].Relisted, "listed again, and still gone")
		assert.False(t, g.Preserved())
		assert.ErrorIs(t, g.Preserve(t.Context()), pause.ErrGone, "called by hand too")

		// Put on a Node, it is back, as a removed one put back is.
		node := draintest.NewNode()
		node.Add(g)
		require.NoError(t, g.Preserve(t.Context()))
		assert.True(t, g.Preserved())
	})
}

// A listing that lags (it still shows running a sandbox paused a moment ago, as a
// cache of the server's state does) lists a preserved sandbox again; the preserve
// again is answered at once, pause.ErrGone ("already preserved"), as pause.Sandbox
// asks and a real server does, and the Report keeps it preserved. A resume is the
// sandbox put on its Node again (Node.Add), whose next preserve runs in full. Fault:
// the fake took every preserve again for a resume and ran a whole attempt (its
// Latency, its script's next step, a Disk write), so a test of a lagging listing
// measured a second preserve per sandbox that no server makes: 4 x 1 s at 4 at once,
// listed again once, took 2 s and 8 attempts of 1 s, not 1 s.
//
//	0 s pass 1: sb-0..3 (1 s each)  1 s pass 2, a listing of 1 s ago: all 4 again, answered at once
//	then a backoff (1 s), pass 3: nothing; 3 s: a resume of sb-1 (Node.Add): its preserve runs (1 s)
func TestPreserveAgainWithNoResumeIsAnsweredAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := draintest.NewNode()
		sbs := node.AddN("sb", 4, time.Second)
		var last []pause.Sandbox
		lagging := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			now, err := node.List(ctx)
			if err != nil {
				return nil, err
			}
			out := append(now, last...) // what the listing before showed, once
			last = nil
			if node.Lists() == 1 {
				last = now
			}
			return out, nil
		})
		p, err := pause.New(lagging, pause.Config{Limit: 4,
			BackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Second) }})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		rep := p.Run(ctx, time.Time{})
		took := time.Since(start)
		require.NoError(t, rep.Err())
		assert.Equal(t, 4, rep.Counts[pause.Preserved], "%v", rep.Counts)
		for _, sb := range sbs {
			e := rep.Entries[0]
			for _, x := range rep.Entries {
				if x.ID == sb.Name {
					e = x
				}
			}
			assert.Equal(t, 1, e.Relisted, sb.Name)
			assert.Equal(t, []time.Time{start, start.Add(time.Second)}, sb.Starts(), "%s: the second at once, pass 2's", sb.Name)
		}
		assert.Equal(t, 2*time.Second, took, "pass 2 at 1 s, answered at once, then the backoff's second")

		err = sbs[1].Preserve(t.Context())
		assert.ErrorIs(t, err, pause.ErrGone, "called by hand too")
		assert.ErrorContains(t, err, "already preserved")
		node.Add(sbs[1]) // its user resumed it
		list, err := node.List(t.Context())
		require.NoError(t, err)
		require.Len(t, list, 1, "the resumed one is listed")
		begin := time.Now()
		require.NoError(t, sbs[1].Preserve(t.Context()))
		assert.Equal(t, time.Second, time.Since(begin), "a preserve in full")
		assert.True(t, sbs[1].Preserved())
	})
}

// A writer that alone could go faster than the device (PerWriter above Bandwidth)
// gets the device's whole Bandwidth when it writes alone, and Thrash slows only
// writers past the first: the knee is one writer at least. Fault: the knee was
// Bandwidth/PerWriter, below one, so a lone writer counted as past it, and a device
// of 1 MiB/s with Thrash 1 wrote 1 MiB alone in 1.5 s, two thirds of its bandwidth.
func TestALoneWriterGetsTheWholeDevice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const mib = 1 << 20
		disk := &draintest.Disk{Bandwidth: mib, PerWriter: 2 * mib, Thrash: 1}
		start := time.Now()
		require.NoError(t, (&draintest.Sandbox{Name: "alone", Bytes: mib, Disk: disk}).Preserve(t.Context()))
		assert.Equal(t, time.Second, time.Since(start).Round(time.Millisecond))

		// Two writers past the knee of one: the device thrashes, 1 MiB/s / (1 + 1 x 1),
		// shared: each of 1 MiB takes 4 s.
		assert.Equal(t, 4*time.Second, writeTwo(t, disk, mib))
	})
}

// writeTwo preserves two sandboxes of size bytes on disk at once and returns
// how long the two took, to the millisecond.
func writeTwo(t *testing.T, disk *draintest.Disk, size int64) time.Duration {
	t.Helper()
	a := &draintest.Sandbox{Name: "a", Bytes: size, Disk: disk}
	b := &draintest.Sandbox{Name: "b", Bytes: size, Disk: disk}
	start := time.Now()
	errs := make(chan error, 1)
	go func() { errs <- a.Preserve(t.Context()) }()
	require.NoError(t, b.Preserve(t.Context()))
	require.NoError(t, <-errs)
	return time.Since(start).Round(time.Millisecond)
}
