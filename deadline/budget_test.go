package deadline_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/deadline"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// s turns fractional seconds into a Duration exactly enough for the table
// (2999.9 s and the like).
func s(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }

// event is one thing that happens to a budget, at an offset from the start
// of the synctest bubble (virtual time, so offsets are exact).
type event struct {
	at     time.Duration
	kind   string        // "preStop", "sigterm", "tighten"
	target time.Duration // tighten: the new SIGKILL, as an offset from bubble start
	want   bool          // what the call reports
}

func preStop(at time.Duration) event { return event{at: at, kind: "preStop", want: true} }
func sigterm(at time.Duration) event { return event{at: at, kind: "sigterm", want: true} }
func tighten(at, kill time.Duration) event {
	return event{at: at, kind: "tighten", target: kill, want: true}
}
func ignored(e event) event { e.want = false; return e }

// TestBudgetKubeletArithmetic replays every case of
// shared/research/kubelet-termination.md at full scale (G = 3600 s) in
// virtual time. Times in the table are offsets from the bubble's start:
//
//	T0 ── preStop hook ──── SIGTERM ── max(G - trunc(hook), 2 s) ── SIGKILL
//	                                               Deadline = SIGKILL - margin ┘
func TestBudgetKubeletArithmetic(t *testing.T) {
	const G = 3600 * time.Second
	tests := []struct {
		name     string
		grace    time.Duration
		margin   time.Duration
		events   []event
		anchor   deadline.Anchor
		start    time.Duration
		kill     time.Duration
		deadline time.Duration
	}{
		{name: "no preStop: SIGKILL = SIGTERM + G", grace: G, margin: 5 * time.Second,
			events: []event{sigterm(s(100))},
			anchor: deadline.AnchorSIGTERM, start: s(100), kill: s(3700), deadline: s(3695)},
		{name: "no preStop, grace below the kubelet's 2 s minimum is raised to 2 s", grace: time.Second, margin: 0,
			events: []event{sigterm(0)}, // the default margin, 1.5 s, takes at most half of the 2 s
			anchor: deadline.AnchorSIGTERM, start: 0, kill: s(2), deadline: s(1)},
		{name: "preStop anchored, before SIGTERM: SIGKILL = T0 + G", grace: G, margin: 5 * time.Second,
			events: []event{preStop(s(10))},
			anchor: deadline.AnchorPreStop, start: s(10), kill: s(3610), deadline: s(3605)},
		{name: "preStop finishes early: elapsed truncated, 2999.9 s counts as 2999 s", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), sigterm(s(2999.9))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(2999.9) + s(601), deadline: s(2999.9) + s(596)},
		{name: "preStop finishes on a whole second", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), sigterm(s(3000))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3600), deadline: s(3595)},
		{name: "preStop runs exactly G: 2 s extension, margin shrinks to 1 s", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), sigterm(G)},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3602), deadline: s(3601)},
		{name: "preStop overruns and is abandoned: SIGKILL = SIGTERM + 2 s", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), sigterm(s(3600.7))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3602.7), deadline: s(3601.7)},
		{name: "remaining 1 s is raised to 2 s", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), sigterm(s(3599.2))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3601.2), deadline: s(3600.2)},
		{name: "remaining exactly 2 s is kept", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), sigterm(s(3598.5))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3600.5), deadline: s(3599.5)},
		{name: "remaining 6 s: margin shrinks to half of it", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), sigterm(s(3594))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3600), deadline: s(3597)},
		{name: "remaining 10 s: the full margin fits", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), sigterm(s(3590))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3600), deadline: s(3595)},
		{name: "second OnPreStop is ignored", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), ignored(preStop(s(10)))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3600), deadline: s(3595)},
		{name: "second OnSIGTERM is ignored", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), sigterm(s(100)), ignored(sigterm(s(3600)))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3600), deadline: s(3595)},
		{name: "OnPreStop after SIGTERM is ignored", grace: G, margin: 5 * time.Second,
			events: []event{sigterm(s(5)), ignored(preStop(s(6)))},
			anchor: deadline.AnchorSIGTERM, start: s(5), kill: s(3605), deadline: s(3600)},
		{name: "Tighten shorter during preStop (kubectl delete --grace-period=30)", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), tighten(s(1), s(30))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(30), deadline: s(25)},
		{name: "SIGTERM after a tightened preStop uses the tightened grace", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), tighten(s(1), s(30)), sigterm(s(30))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(32), deadline: s(31)},
		{name: "hook ends early after Tighten: SIGKILL stays at the deletionTimestamp", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), tighten(s(1), s(30)), sigterm(s(10.5))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(30), deadline: s(25)},
		{name: "hook ends late after Tighten: SIGTERM + 2 s is later than the deletionTimestamp", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), tighten(s(1), s(30)), sigterm(s(28.5))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(30.5), deadline: s(29.5)},
		{name: "Tighten longer is ignored", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), ignored(tighten(s(1), s(4000)))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3600), deadline: s(3595)},
		{name: "Tighten to the same time is ignored", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), ignored(tighten(s(1), s(3600)))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3600), deadline: s(3595)},
		{name: "Tighten after an overrun keeps the kubelet's 2 s", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), sigterm(G), ignored(tighten(s(3600.5), s(3599)))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(3602), deadline: s(3601)},
		{name: "Tighten after SIGTERM stops at SIGTERM + 2 s", grace: G, margin: 5 * time.Second,
			events: []event{sigterm(0), tighten(s(1), s(30)), tighten(s(2), s(1))},
			anchor: deadline.AnchorSIGTERM, start: 0, kill: s(2), deadline: s(1)},
		{name: "Tighten before T0 stops at T0", grace: G, margin: 5 * time.Second,
			events: []event{preStop(s(100)), tighten(s(101), s(50))},
			anchor: deadline.AnchorPreStop, start: s(100), kill: s(100), deadline: s(100)},
		{name: "Tighten with a short kill shrinks the margin to half", grace: G, margin: 5 * time.Second,
			events: []event{preStop(0), tighten(s(1), s(6))},
			anchor: deadline.AnchorPreStop, start: 0, kill: s(6), deadline: s(3)},
		{name: "Tighten on an unanchored budget anchors at now", grace: G, margin: 5 * time.Second,
			events: []event{tighten(s(5), s(35)), ignored(preStop(s(6)))},
			anchor: deadline.AnchorDeletionTimestamp, start: s(5), kill: s(35), deadline: s(30)},
		{name: "deletionTimestamp anchor: SIGTERM leaves SIGKILL where it is", grace: G, margin: 5 * time.Second,
			events: []event{tighten(0, s(600)), sigterm(s(10))},
			anchor: deadline.AnchorDeletionTimestamp, start: 0, kill: s(600), deadline: s(595)},
		{name: "exec hook the server did not see: SIGTERM, then the deletionTimestamp corrects SIGKILL", grace: G, margin: 5 * time.Second,
			events: []event{sigterm(s(1800.3)), tighten(s(1800.5), s(3600))},
			anchor: deadline.AnchorSIGTERM, start: s(1800.3), kill: s(3600), deadline: s(3595)},
		{name: "deletionTimestamp anchor: a late SIGTERM still gets 2 s", grace: G, margin: 5 * time.Second,
			events: []event{tighten(0, s(600)), sigterm(s(599.5))},
			anchor: deadline.AnchorDeletionTimestamp, start: 0, kill: s(601.5), deadline: s(600.5)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := time.Now()
				b, err := deadline.New(tc.grace, deadline.Config{Margin: tc.margin})
				require.NoError(t, err)
				for i, e := range tc.events {
					time.Sleep(time.Until(base.Add(e.at)))
					var got bool
					switch e.kind {
					case "preStop":
						got = b.OnPreStop(time.Now())
					case "sigterm":
						got = b.OnSIGTERM(time.Now())
					case "tighten":
						got = b.Tighten(base.Add(e.target))
					}
					assert.Equal(t, e.want, got, "event %d (%s at %v) reported", i, e.kind, e.at)
				}
				st := b.State()
				assert.Equal(t, tc.anchor, st.Anchor, "anchor")
				assert.Equal(t, tc.start, st.Start.Sub(base), "T0")
				assert.Equal(t, tc.kill, st.Kill.Sub(base), "SIGKILL")
				assert.Equal(t, tc.deadline, st.Deadline.Sub(base), "deadline")
				assert.Equal(t, st.Start, b.Start())
				assert.Equal(t, st.Kill, b.Kill())
				assert.Equal(t, st.Deadline, b.Deadline())
				assert.True(t, b.Anchored())
			})
		})
	}
}

// TestTightenAndSIGTERMGiveOneSIGKILLInEitherOrder pins that the pod's
// deletionTimestamp (SIGKILL at T0 + 30 s here) read during the preStop hook
// gives the same SIGKILL as the same read landing after SIGTERM: the
// deletionTimestamp, or SIGTERM + 2 s when that is later. A drain reads the
// pod beside its preStop wait and again at SIGTERM, so which comes first is
// a race. Before, the read landing first had SIGTERM subtract the hook's
// whole seconds from the cut grace, which added the rest of the second:
// 30.5 s for a hook of 10.5 s, 30.053 s for one of 53 ms, where the read
// landing after SIGTERM gave 30 s.
func TestTightenAndSIGTERMGiveOneSIGKILLInEitherOrder(t *testing.T) {
	const deletion = 30 * time.Second // the deletionTimestamp, from T0
	for _, tc := range []struct{ sigterm, kill time.Duration }{
		{s(0.053), deletion},
		{s(10.5), deletion},
		{s(27.9), deletion},
		{s(28), deletion},
		{s(28.5), s(30.5)}, // the kubelet's 2 s after SIGTERM
		{s(31.2), s(33.2)}, // the hook overran the deletion's grace
	} {
		for _, readFirst := range []bool{true, false} {
			name := fmt.Sprintf("SIGTERM at T0+%v, read landing before it %v", tc.sigterm, readFirst)
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					t0 := time.Now()
					b, err := deadline.New(3600*time.Second, deadline.Config{})
					require.NoError(t, err)
					b.OnPreStop(t0)
					if readFirst {
						b.Tighten(t0.Add(deletion))
					}
					time.Sleep(tc.sigterm)
					b.OnSIGTERM(time.Now())
					if !readFirst {
						b.Tighten(t0.Add(deletion))
					}
					assert.Equal(t, tc.kill, b.Kill().Sub(t0), "SIGKILL")
				})
			})
		}
	}
}

func TestKubeletRemaining(t *testing.T) {
	const G = 3600 * time.Second
	tests := []struct {
		grace, elapsed, want time.Duration
	}{
		{G, 0, G},
		{G, s(2999.9), s(601)},
		{G, s(2999), s(601)},
		{G, s(3000), s(600)},
		{G, s(3597.999), s(3)},
		{G, s(3598), s(2)},
		{G, s(3599), s(2)},
		{G, G, s(2)},
		{G, G + s(0.9), s(2)},
		{G, 10 * G, s(2)},
		{s(1), 0, s(2)},
		{s(30), s(0.4), s(30)},
		// Past the largest Duration the difference saturates: it wrapped
		// round to the most negative Duration (so 2 s) or to the largest.
		{math.MaxInt64, -s(1), math.MaxInt64}, // SIGTERM given a second before T0
		{G, math.MinInt64, math.MaxInt64},
		{math.MinInt64 + 1, s(3), s(2)},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, deadline.KubeletRemaining(tc.grace, tc.elapsed), "grace %v, hook ran %v", tc.grace, tc.elapsed)
	}
	// The budget's own use: a SIGTERM time before T0 (OnSIGTERM counts it
	// as a hook of no time) with the largest grace left SIGKILL a second
	// after T0.
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(math.MaxInt64, deadline.Config{})
		require.NoError(t, err)
		t0 := time.Now()
		b.OnPreStop(t0)
		b.OnSIGTERM(t0.Add(-time.Second))
		assert.Equal(t, time.Duration(math.MaxInt64), b.Kill().Sub(t0.Add(-time.Second)), "SIGKILL after SIGTERM")
	})
}

func TestBudgetUnanchoredReadsAsIfTerminationStartedNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(3600*time.Second, deadline.Config{Margin: 10 * time.Second})
		require.NoError(t, err)
		assert.False(t, b.Anchored())
		for range 3 {
			now := time.Now()
			st := b.State()
			assert.Equal(t, deadline.AnchorNone, st.Anchor)
			assert.Equal(t, now, st.Start)
			assert.Equal(t, now.Add(3600*time.Second), st.Kill)
			assert.Equal(t, now.Add(3590*time.Second), st.Deadline)
			assert.Equal(t, 3590*time.Second, b.Remaining())
			time.Sleep(time.Hour)
		}
		assert.Equal(t, 3600*time.Second, b.Grace())
		assert.Equal(t, 10*time.Second, b.Margin())
	})
}

func TestBudgetRemainingCountsDownToZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(3600*time.Second, deadline.Config{})
		require.NoError(t, err)
		b.OnPreStop(time.Now())
		assert.Equal(t, 3595*time.Second, b.Remaining())
		time.Sleep(3000 * time.Second)
		assert.Equal(t, 595*time.Second, b.Remaining())
		time.Sleep(600 * time.Second)
		assert.Zero(t, b.Remaining())
	})
}

func TestBudgetContextFiresExactlyAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		b, err := deadline.New(3600*time.Second, deadline.Config{})
		require.NoError(t, err)
		b.OnPreStop(start)
		ctx, cancel := b.Context(t.Context())
		defer cancel()
		dl, ok := ctx.Deadline()
		require.True(t, ok)
		assert.Equal(t, start.Add(3595*time.Second), dl)
		<-ctx.Done()
		assert.Equal(t, start.Add(3595*time.Second), time.Now())
		assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	})
}

func TestBudgetChangedWakesWaitersOnEachChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		b, err := deadline.New(3600*time.Second, deadline.Config{})
		require.NoError(t, err)
		var woke []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 3 {
				<-b.Changed()
				woke = append(woke, time.Since(start))
			}
		}()
		synctest.Wait()
		time.Sleep(10 * time.Second)
		b.OnPreStop(time.Now()) // change 1
		synctest.Wait()
		time.Sleep(20 * time.Second)
		b.Tighten(start.Add(3700 * time.Second)) // later: no change, no wake-up
		b.Tighten(start.Add(600 * time.Second))  // change 2
		synctest.Wait()
		time.Sleep(30 * time.Second)
		b.OnPreStop(time.Now()) // ignored: no wake-up
		b.OnSIGTERM(time.Now()) // change 3
		<-done
		assert.Equal(t, []time.Duration{10 * time.Second, 30 * time.Second, 60 * time.Second}, woke)
	})
}

func TestFromKillTimeAnchorsNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		b, err := deadline.FromKillTime(now.Add(30*time.Second), deadline.Config{})
		require.NoError(t, err)
		st := b.State()
		assert.Equal(t, deadline.AnchorDeletionTimestamp, st.Anchor)
		assert.Equal(t, now, st.Start)
		assert.Equal(t, now.Add(30*time.Second), st.Kill)
		assert.Equal(t, now.Add(27*time.Second), st.Deadline, "default margin: a tenth of the 30 s")
		assert.Equal(t, 30*time.Second, b.Grace())
		assert.False(t, b.OnPreStop(now), "a deletionTimestamp anchor is not replaced by preStop")
	})
}

func TestFromKillTimeThenSIGTERM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		b, err := deadline.FromKillTime(now.Add(600*time.Second), deadline.Config{})
		require.NoError(t, err)
		time.Sleep(100 * time.Second)
		assert.True(t, b.OnSIGTERM(time.Now()))
		assert.Equal(t, now.Add(600*time.Second), b.Kill(), "SIGTERM does not move a deletionTimestamp")

		late, err := deadline.FromKillTime(now.Add(700*time.Second), deadline.Config{})
		require.NoError(t, err)
		time.Sleep(600 * time.Second) // SIGTERM after the deletionTimestamp: the kubelet still waits 2 s
		late.OnSIGTERM(time.Now())
		assert.Equal(t, time.Now().Add(2*time.Second), late.Kill())
		assert.Equal(t, time.Now().Add(time.Second), late.Deadline())
	})
}

func TestFromKillTimeLateShrinksMargin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		b, err := deadline.FromKillTime(now.Add(2*time.Second), deadline.Config{}) // default margin 1.5 s takes at most half
		require.NoError(t, err)
		assert.Equal(t, deadline.MinimumDefaultMargin, b.Margin())
		assert.Equal(t, now.Add(time.Second), b.Deadline())

		b, err = deadline.FromKillTime(now.Add(4*time.Second), deadline.Config{Margin: 5 * time.Second}) // does not fit
		require.NoError(t, err)
		assert.Equal(t, now.Add(2*time.Second), b.Deadline())
	})
}

func TestZeroBudgetDoesNotPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b deadline.Budget
		ch := b.Changed()
		require.NotNil(t, ch)
		now := time.Now()
		assert.Equal(t, now, b.Deadline())
		assert.True(t, b.OnPreStop(now))
		select {
		case <-ch:
		default:
			t.Fatal("Changed not closed by OnPreStop")
		}
		assert.True(t, b.OnSIGTERM(now))
		assert.Equal(t, now.Add(deadline.MinimumGracePeriod), b.Kill())
	})
}

func TestBudgetBadInputNamesTheField(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		tests := []struct {
			name  string
			build func() (*deadline.Budget, error)
			field string
		}{
			{"zero grace", func() (*deadline.Budget, error) { return deadline.New(0, deadline.Config{}) }, "grace"},
			{"negative grace", func() (*deadline.Budget, error) { return deadline.New(-time.Second, deadline.Config{}) }, "grace"},
			{"margin equal to grace", func() (*deadline.Budget, error) {
				return deadline.New(5*time.Second, deadline.Config{Margin: 5 * time.Second})
			}, "deadline: Config.Margin (5s) must be smaller than the grace period 5s"},
			{"margin above grace", func() (*deadline.Budget, error) {
				return deadline.New(3*time.Second, deadline.Config{Margin: 4 * time.Second})
			}, "Config.Margin (4s) must be smaller"},
			{"negative margin", func() (*deadline.Budget, error) {
				return deadline.New(time.Hour, deadline.Config{Margin: -time.Nanosecond})
			}, "deadline: Config.Margin must be >= 0, got -1ns"},
			{"negative preStop sleep", func() (*deadline.Budget, error) {
				return deadline.New(time.Hour, deadline.Config{PreStopSleep: -time.Second})
			}, "deadline: Config.PreStopSleep must be >= 0, got -1s"},
			{"preStop sleep longer than the grace", func() (*deadline.Budget, error) {
				return deadline.New(30*time.Second, deadline.Config{PreStopSleep: 31 * time.Second})
			}, "deadline: Config.PreStopSleep (31s) must not be longer than the grace period 30s"},
			{"deletionTimestamp in the past", func() (*deadline.Budget, error) {
				return deadline.FromKillTime(now.Add(-time.Second), deadline.Config{})
			}, "deletionTimestamp"},
			{"deletionTimestamp now", func() (*deadline.Budget, error) { return deadline.FromKillTime(now, deadline.Config{}) }, "deletionTimestamp"},
			{"negative margin with deletionTimestamp", func() (*deadline.Budget, error) {
				return deadline.FromKillTime(now.Add(time.Hour), deadline.Config{Margin: -time.Second})
			}, "deadline: Config.Margin must be >= 0, got -1s"},
		}
		for _, tc := range tests {
			b, err := tc.build()
			assert.Nil(t, b, tc.name)
			if assert.Error(t, err, tc.name) {
				assert.Contains(t, err.Error(), tc.field, tc.name)
			}
		}
	})
}

// TestDefaultMarginScalesWithGrace: with a zero Config.Margin the margin is a
// tenth of the grace period, at least 1.5 s and at most 5 s, so a short
// grace period does not give a third of its time away and a long one keeps
// 5 s for the exit.
func TestDefaultMarginScalesWithGrace(t *testing.T) {
	for _, tc := range []struct{ grace, want time.Duration }{
		{time.Second, 1500 * time.Millisecond},
		{10 * time.Second, 1500 * time.Millisecond},
		{15 * time.Second, 1500 * time.Millisecond},
		{20 * time.Second, 2 * time.Second},
		{30 * time.Second, 3 * time.Second},
		{50 * time.Second, 5 * time.Second},
		{3600 * time.Second, 5 * time.Second},
	} {
		assert.Equal(t, tc.want, deadline.DefaultMarginFor(tc.grace), "grace %v", tc.grace)
		b, err := deadline.New(tc.grace, deadline.Config{})
		require.NoError(t, err, "grace %v", tc.grace)
		assert.Equal(t, tc.want, b.Margin(), "grace %v", tc.grace)
	}
	assert.Equal(t, deadline.MinimumDefaultMargin, deadline.DefaultMarginFor(10*time.Second))
	assert.Equal(t, deadline.DefaultMargin, deadline.DefaultMarginFor(3600*time.Second))
}

// TestDefaultMarginFollowsACutGrace: kubectl delete --grace-period=10 of
// a pod whose manifest says an hour. The default margin is the one of the
// 10 s the kubelet now uses (1.5 s), not the hour's 5 s, which would have
// kept half of them back from the drain; a margin the user set stays.
func TestDefaultMarginFollowsACutGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b, err := deadline.New(3600*time.Second, deadline.Config{})
		require.NoError(t, err)
		b.OnPreStop(t0)
		assert.Equal(t, 5*time.Second, b.Margin(), "the hour's margin before the deletion is known")
		b.Tighten(t0.Add(10 * time.Second))
		assert.Equal(t, 10*time.Second, b.GraceInUse())
		assert.Equal(t, 1500*time.Millisecond, b.Margin())
		assert.Equal(t, t0.Add(8500*time.Millisecond), b.Deadline())
		b.OnSIGTERM(t0.Add(time.Second)) // the hook returned after 1 s
		assert.Equal(t, t0.Add(8500*time.Millisecond), b.Deadline(), "SIGTERM keeps the deletion's SIGKILL and the margin")

		set, err := deadline.New(3600*time.Second, deadline.Config{Margin: 5 * time.Second})
		require.NoError(t, err)
		set.OnPreStop(t0)
		set.Tighten(t0.Add(10 * time.Second))
		assert.Equal(t, 5*time.Second, set.Margin(), "Config.Margin is the user's")
		assert.Equal(t, t0.Add(5*time.Second), set.Deadline())
	})
}

// TestDefaultMarginAtTenSecondGrace: the README's server (grace 10 s,
// nothing else set) keeps 1.5 s, not 5 s, back from SIGKILL.
//
//	T0 = SIGTERM ──────────────────── 8.5 s = Deadline ── 10 s SIGKILL
func TestDefaultMarginAtTenSecondGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(10*time.Second, deadline.Config{})
		require.NoError(t, err)
		t0 := time.Now()
		b.OnSIGTERM(t0)
		assert.Equal(t, t0.Add(10*time.Second), b.Kill())
		assert.Equal(t, t0.Add(8500*time.Millisecond), b.Deadline())
		assert.Equal(t, 8500*time.Millisecond, b.Remaining())
	})
}

// TestShortGraceWithoutMarginIsAccepted: only a Config.Margin that is set
// must be smaller than the grace period; the default one shrinks
// to half of the time left, like any margin that does not fit.
func TestShortGraceWithoutMarginIsAccepted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(time.Second, deadline.Config{})
		require.NoError(t, err)
		assert.Equal(t, deadline.MinimumDefaultMargin, b.Margin())
		t0 := time.Now()
		b.OnPreStop(t0)
		assert.Equal(t, t0.Add(time.Second), b.Kill())
		assert.Equal(t, t0.Add(500*time.Millisecond), b.Deadline(), "the margin takes at most half")
		b.OnSIGTERM(t0) // the kubelet still waits 2 s after SIGTERM
		assert.Equal(t, t0.Add(2*time.Second), b.Kill())
		assert.Equal(t, t0.Add(time.Second), b.Deadline())

		_, err = deadline.New(time.Second, deadline.Config{Margin: time.Second})
		assert.ErrorContains(t, err, "deadline: Config.Margin (1s) must be smaller than the grace period 1s", "an explicit margin must still be smaller than the grace")
	})
}

func TestBudgetConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		b, err := deadline.New(3600*time.Second, deadline.Config{})
		require.NoError(t, err)
		done := make(chan struct{})
		for i := range 8 {
			go func() {
				defer func() { done <- struct{}{} }()
				for j := range 100 {
					switch (i + j) % 5 {
					case 0:
						b.OnPreStop(start)
					case 1:
						b.OnSIGTERM(start.Add(time.Duration(j) * time.Second))
					case 2:
						b.Tighten(start.Add(time.Duration(3600-j) * time.Second))
					case 3:
						st := b.State()
						if !st.Start.IsZero() && st.Deadline.Before(st.Start) {
							t.Errorf("deadline %v before T0 %v", st.Deadline, st.Start)
						}
					default:
						<-b.Changed()
					}
				}
			}()
		}
		// Keep changing the budget so that Changed waiters are released.
		stop := make(chan struct{})
		tightened := make(chan struct{})
		go func() {
			defer close(tightened)
			for j := 0; ; j++ {
				b.Tighten(start.Add(time.Duration(3000-j) * time.Second))
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		for range 8 {
			<-done
		}
		close(stop)
		<-tightened
	})
}

// The grace in use is the manifest's until a deletion cuts it, then the
// time from T0 to the deletion's SIGKILL; a later, longer one changes
// nothing, as Tighten never moves SIGKILL later.
func TestGraceInUseFollowsADeletionsShorterGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(time.Hour, deadline.Config{})
		require.NoError(t, err)
		assert.Equal(t, time.Hour, b.GraceInUse(), "before T0")
		t0 := time.Now()
		b.OnPreStop(t0)
		assert.Equal(t, time.Hour, b.GraceInUse())
		b.Tighten(t0.Add(30 * time.Second))
		assert.Equal(t, 30*time.Second, b.GraceInUse())
		assert.Equal(t, time.Hour, b.Grace(), "the budget's own grace stays")
		b.Tighten(t0.Add(time.Minute))
		assert.Equal(t, 30*time.Second, b.GraceInUse())
	})
}

// Fault (docs/faults.md row 228): a second, shorter deletion while the
// preStop hook ran, and a kubelet that runs the hook again. The API server
// moves the deletionTimestamp to the FIRST deletion's time plus the new
// grace; the kubelet's new run times its grace from the new start.
// Tightening to the deletionTimestamp put SIGKILL 600 s early here, and
// the SIGTERM after it took the kubelet's 2 s for all it had to do.
//
//	T0      first deletion (grace 3600 s): preStop, SIGKILL at T0+3600
//	T0+600  kubectl delete --grace-period=900: deletionTimestamp T0+900;
//	        the kubelet runs the hook again: SIGKILL at T0+600+900
//	T0+610.5 the hook answers, SIGTERM: 900 - 10 whole seconds left: T0+1500.5
func TestRestartMovesSIGKILLToTheKubeletsNewRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b, err := deadline.New(3600*time.Second, deadline.Config{})
		require.NoError(t, err)
		b.OnPreStop(t0)
		b.Tighten(t0.Add(3600 * time.Second)) // the first deletion's timestamp: no change
		time.Sleep(600 * time.Second)
		rerun := time.Now()
		b.Tighten(t0.Add(900 * time.Second)) // the deletionTimestamp read first (v0 stopped here)
		assert.True(t, b.OnRestart(rerun, 900*time.Second))
		assert.Equal(t, s(1500), b.Kill().Sub(t0), "the new run's SIGKILL, later than the deletionTimestamp")
		st := b.State()
		assert.Equal(t, t0, st.Start, "T0 stays")
		assert.Equal(t, rerun, st.Restart)
		assert.Equal(t, 900*time.Second, b.GraceInUse())
		assert.Equal(t, 5*time.Second, b.Margin(), "the margin of the new run's grace")

		assert.False(t, b.OnRestart(rerun, 900*time.Second), "the same run read again")
		assert.False(t, b.OnRestart(rerun.Add(-time.Second), 60*time.Second), "an older run")
		time.Sleep(10*time.Second + 500*time.Millisecond)
		b.OnSIGTERM(time.Now())
		assert.Equal(t, s(1500.5), b.Kill().Sub(t0), "SIGTERM: the kubelet's arithmetic from the new run (10 whole seconds of hook)")
	})
}

// A restart's grace longer than the budget's (a deletion asked for more,
// or a caller passed a grace as read) counts as the budget's: a run over
// gets no more than the first run's grace. It was taken as given, and
// put SIGKILL past the kubelet's where the grace was not the deletion's.
// (A first deletion's longer grace, which the kubelet gives in full, the
// budget takes only when told it at the deletion's time, before any run
// over: row 1025, TestDeletionsLongerGraceMovesSIGKILLLater.) And a zero
// time tightens nothing: it was taken for a SIGKILL at T0.
func TestRestartAndTightenTakeNoMoreThanTheKubeletGives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b, err := deadline.New(60*time.Second, deadline.Config{})
		require.NoError(t, err)
		b.OnPreStop(t0)
		time.Sleep(10 * time.Second)
		rerun := time.Now()
		require.True(t, b.OnRestart(rerun, time.Hour))
		assert.Equal(t, s(70), b.Kill().Sub(t0), "the new run with the pod's 60 s, not the hour")
		assert.Equal(t, 60*time.Second, b.GraceInUse())

		assert.False(t, b.Tighten(time.Time{}))
		assert.Equal(t, s(70), b.Kill().Sub(t0), "a zero time is no SIGKILL")
	})
}

// The cases around a restart: one the kubelet makes after SIGTERM (a
// deletion during the shutdown: the hook again, answered at once, then
// SIGTERM again), a read of the run that lands after SIGTERM, the API
// server's 1 s when the new grace had already run out since the first
// deletion, and a shorter grace for the same run.
func TestRestartAroundSIGTERM(t *testing.T) {
	tests := []struct {
		name   string
		events func(b *deadline.Budget, t0 time.Time)
		kill   time.Duration // from T0
	}{
		{"during the shutdown", func(b *deadline.Budget, t0 time.Time) {
			time.Sleep(100 * time.Second)
			b.OnSIGTERM(time.Now())
			time.Sleep(50 * time.Second)
			b.OnRestart(time.Now(), 30*time.Second)
		}, s(180)},
		{"its read after SIGTERM", func(b *deadline.Budget, t0 time.Time) {
			time.Sleep(100 * time.Second)
			rerun := time.Now()
			time.Sleep(20*time.Second + 700*time.Millisecond)
			b.OnSIGTERM(time.Now())
			b.OnRestart(rerun, 30*time.Second)
		}, 130700 * time.Millisecond}, // SIGTERM + 30 - 20 whole seconds
		{"the API server's 1 s", func(b *deadline.Budget, t0 time.Time) {
			time.Sleep(100 * time.Second)
			b.OnRestart(time.Now(), time.Second)
			time.Sleep(300 * time.Millisecond)
			b.OnSIGTERM(time.Now())
		}, s(102.3)},
		{"the same run shortened again", func(b *deadline.Budget, t0 time.Time) {
			time.Sleep(100 * time.Second)
			rerun := time.Now()
			b.OnRestart(rerun, 300*time.Second)
			b.OnRestart(rerun, 60*time.Second)
			b.OnRestart(rerun, 120*time.Second) // grace only decreases
		}, s(160)},
		{"unanchored", func(b *deadline.Budget, t0 time.Time) {
			b.OnRestart(t0, 60*time.Second)
		}, s(60)},
		{"no grace", func(b *deadline.Budget, t0 time.Time) {
			b.OnPreStop(t0)
			b.OnRestart(t0.Add(time.Second), 0)
		}, s(3600)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				b, err := deadline.New(3600*time.Second, deadline.Config{})
				require.NoError(t, err)
				if tc.name != "unanchored" && tc.name != "no grace" {
					b.OnPreStop(t0)
				}
				tc.events(b, t0)
				assert.Equal(t, tc.kill, b.Kill().Sub(t0))
				st := b.State()
				assert.False(t, st.Deadline.Before(st.Start), "T0 <= Deadline")
				assert.False(t, st.Kill.Before(st.Deadline), "Deadline <= Kill")
			})
		})
	}
}

// Fault (docs/faults.md row 1025): `kubectl delete --grace-period=600` on a
// pod whose manifest says 30 s. The kubelet v1.34.4 gives the deletion's
// grace in full (calculateEffectiveGracePeriod takes
// deletionGracePeriodSeconds for a pod not terminating yet), and the
// budget had no way to take it: OnRestart capped it at 30 s, and a call
// for the deletion, made before T0, was an older run and changed nothing.
// SIGKILL was planned at T0+30 s, 570 s early. OnRestart at the deletion's
// time now moves SIGKILL to its deletionTimestamp, which OnSIGTERM keeps;
// a run over takes at most that grace; the shares stay the budget's.
//
//	-0.2 s  the deletion (600 s): deletionTimestamp T0+599.8 s
//	0 s     preStop, T0: SIGKILL T0+30 s, then T0+599.8 s
//	100 s   SIGTERM: SIGKILL stays (the kubelet's is after it)
func TestDeletionsLongerGraceMovesSIGKILLLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &lines{}
		b, err := deadline.New(30*time.Second, deadline.Config{Logger: slog.New(h)})
		require.NoError(t, err)
		t0 := time.Now()
		made := t0.Add(-200 * time.Millisecond)
		b.OnPreStop(t0)
		require.True(t, b.OnRestart(made, 600*time.Second))
		assert.Equal(t, s(599.8), b.Kill().Sub(t0), "the deletionTimestamp")
		st := b.State()
		assert.True(t, st.Restart.IsZero(), "no run over")
		assert.Equal(t, 30*time.Second, b.GraceInUse(), "the shares stay the budget's")
		assert.Equal(t, 3*time.Second, b.Margin())
		assert.Equal(t, s(596.8), st.Deadline.Sub(t0))
		require.Len(t, h.got, 2)
		assert.Equal(t, 600*time.Second, h.got[1]["deletion_grace"], "the line names the grace SIGKILL follows")

		assert.False(t, b.OnRestart(made, 600*time.Second), "read again")
		assert.False(t, b.Tighten(made.Add(600*time.Second)), "its deletionTimestamp read again")
		time.Sleep(100 * time.Second)
		require.True(t, b.OnSIGTERM(time.Now()))
		assert.Equal(t, s(599.8), b.Kill().Sub(t0), "SIGTERM keeps it")

		time.Sleep(100 * time.Second)
		assert.True(t, b.OnRestart(time.Now(), 900*time.Second), "a kubelet restarted")
		assert.Equal(t, s(800), b.Kill().Sub(t0), "the run over at T0+200 s with the first run's 600 s, not 900 s, nor the manifest's 30 s")
	})
}

// The first run's longer grace moves SIGKILL only later, only for a
// deletion made by T0, and not once the kubelet gave up on the hook.
func TestDeletionsLongerGraceIsNoMoreThanTheKubeletGives(t *testing.T) {
	for _, tc := range []struct {
		name    string
		events  func(b *deadline.Budget, t0 time.Time) bool // OnRestart's answer
		kill    time.Duration                               // from T0
		changed bool
	}{
		{"no hook: T0 is SIGTERM", func(b *deadline.Budget, t0 time.Time) bool {
			b.OnSIGTERM(t0)
			return b.OnRestart(t0.Add(-100*time.Millisecond), 600*time.Second)
		}, s(599.9), true},
		{"a deletion long before T0: its timestamp is earlier (Tighten's)", func(b *deadline.Budget, t0 time.Time) bool {
			b.OnPreStop(t0)
			return b.OnRestart(t0.Add(-590*time.Second), 600*time.Second)
		}, s(30), false},
		{"the kubelet gave up on the hook", func(b *deadline.Budget, t0 time.Time) bool {
			b.OnPreStop(t0)
			time.Sleep(30 * time.Second)
			b.OnHookAbandoned(time.Now())
			return b.OnRestart(t0.Add(-100*time.Millisecond), 600*time.Second)
		}, s(32), false},
		{"a call after T0 is a run over, at most the budget's grace", func(b *deadline.Budget, t0 time.Time) bool {
			b.OnPreStop(t0)
			time.Sleep(5 * time.Second)
			return b.OnRestart(time.Now(), 600*time.Second)
		}, s(35), true},
		{"not longer than the budget's: an older run", func(b *deadline.Budget, t0 time.Time) bool {
			b.OnPreStop(t0)
			return b.OnRestart(t0.Add(-100*time.Millisecond), 20*time.Second)
		}, s(30), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, err := deadline.New(30*time.Second, deadline.Config{})
				require.NoError(t, err)
				t0 := time.Now()
				changed := tc.events(b, t0)
				assert.Equal(t, tc.kill, b.Kill().Sub(t0))
				assert.Equal(t, tc.changed, changed)
				st := b.State()
				assert.False(t, st.Deadline.Before(st.Start), "T0 <= Deadline")
				assert.False(t, st.Kill.Before(st.Deadline), "Deadline <= Kill")
			})
		})
	}
}
