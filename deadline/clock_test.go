package deadline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/wallstep"
)

// wallOnly is t as a time read from outside the process carries it: an exec hook's
// ?start= and a pod's deletionTimestamp are RFC 3339 text, parsed with no monotonic clock
// reading.
func wallOnly(t *testing.T, at time.Time) time.Time {
	t.Helper()
	w, err := time.Parse(time.RFC3339Nano, at.UTC().Format(time.RFC3339Nano))
	require.NoError(t, err)
	return w
}

// onMonotonic reports whether t carries a monotonic clock reading: its String ends in
// "m=±<seconds>" then (package time). Go compares two such times by that reading alone;
// when either lacks one, by the wall clock.
func onMonotonic(t time.Time) bool { return strings.Contains(t.String(), " m=") }

// The kubelet times the grace on its monotonic clock (time.After, containerd's timeout),
// so a step of the node's wall clock (NTP stepping it, a VM resumed or migrated) moves
// the real SIGKILL not at all. Every time the budget hands out carries a monotonic
// reading, including those it was given as wall-clock text: T0 from an exec hook's
// ?start= (drain's PreStop passes it to OnPreStop) and SIGKILL from a deletionTimestamp
// (Tighten: with a pod reader, every deletion, the kubelet's notice lag putting
// deletion + grace before T0 + grace). Before, the budget kept them as given: from then
// on Kill, Deadline, Remaining, every Plan window and context, and OnSIGTERM's
// hook time were compared with time.Now by the wall clock, so a step back of X between
// the preStop call and the end of the drain made every deadline X late, past the
// kubelet's SIGKILL, and the hook's elapsed time X short.
//
// Outside synctest on purpose: a bubble's time.Now carries no monotonic reading.
func TestBudgetTimesAreOnTheMonotonicClockWhateverItWasGiven(t *testing.T) {
	now := time.Now()
	require.True(t, onMonotonic(now), "time.Now carries a monotonic reading")
	require.False(t, onMonotonic(wallOnly(t, now)), "parsed text does not")

	for _, tc := range []struct {
		name  string
		build func(t *testing.T) (*deadline.Budget, time.Time, time.Time) // budget, T0, SIGKILL
	}{
		{"an exec hook's ?start=", func(t *testing.T) (*deadline.Budget, time.Time, time.Time) {
			b, err := deadline.New(3600*time.Second, deadline.Config{})
			require.NoError(t, err)
			t0 := wallOnly(t, time.Now().Add(-200*time.Millisecond))
			require.True(t, b.OnPreStop(t0))
			return b, t0, t0.Add(3600 * time.Second)
		}},
		{"a deletionTimestamp after the preStop call", func(t *testing.T) (*deadline.Budget, time.Time, time.Time) {
			b, err := deadline.New(3600*time.Second, deadline.Config{})
			require.NoError(t, err)
			t0 := time.Now()
			b.OnPreStop(t0)
			kill := wallOnly(t, t0.Add(3600*time.Second-150*time.Millisecond)) // deleted 150 ms before the hook
			require.True(t, b.Tighten(kill))
			return b, t0, kill
		}},
		{"a deletionTimestamp anchoring the budget", func(t *testing.T) (*deadline.Budget, time.Time, time.Time) {
			b, err := deadline.New(3600*time.Second, deadline.Config{})
			require.NoError(t, err)
			kill := wallOnly(t, time.Now().Add(30*time.Second))
			require.True(t, b.Tighten(kill))
			return b, b.Start(), kill
		}},
		{"a deletionTimestamp after SIGTERM", func(t *testing.T) (*deadline.Budget, time.Time, time.Time) {
			b, err := deadline.New(3600*time.Second, deadline.Config{})
			require.NoError(t, err)
			t0 := time.Now()
			b.OnSIGTERM(t0)
			kill := wallOnly(t, t0.Add(30*time.Second))
			require.True(t, b.Tighten(kill))
			return b, t0, kill
		}},
		{"FromKillTime", func(t *testing.T) (*deadline.Budget, time.Time, time.Time) {
			kill := wallOnly(t, time.Now().Add(30*time.Second))
			b, err := deadline.FromKillTime(kill, deadline.Config{})
			require.NoError(t, err)
			return b, b.Start(), kill
		}},
		{"a SIGTERM time given as text", func(t *testing.T) (*deadline.Budget, time.Time, time.Time) {
			b, err := deadline.New(3600*time.Second, deadline.Config{})
			require.NoError(t, err)
			t0 := time.Now()
			b.OnPreStop(t0)
			at := wallOnly(t, t0.Add(time.Second+300*time.Millisecond))
			require.True(t, b.OnSIGTERM(at))
			return b, t0, at.Add(3599 * time.Second)
		}},
		{"an abandoned hook's SIGTERM given as text", func(t *testing.T) (*deadline.Budget, time.Time, time.Time) {
			b, err := deadline.New(3600*time.Second, deadline.Config{})
			require.NoError(t, err)
			t0 := time.Now()
			b.OnPreStop(t0)
			at := wallOnly(t, t0.Add(time.Second))
			require.True(t, b.OnHookAbandoned(at))
			return b, t0, at.Add(deadline.MinimumGracePeriod)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, t0, kill := tc.build(t)
			st := b.State()
			assert.True(t, st.Start.Equal(t0), "T0 %v, want %v", st.Start, t0)
			assert.True(t, st.Kill.Equal(kill), "SIGKILL %v, want %v: the same instant", st.Kill, kill)
			for what, at := range map[string]time.Time{"Start": st.Start, "Kill": st.Kill, "Deadline": st.Deadline, "SIGTERM": st.SIGTERM} {
				if what == "SIGTERM" && at.IsZero() {
					continue
				}
				assert.True(t, onMonotonic(at), "%s %v is compared with time.Now by the wall clock", what, at)
			}
			p, err := deadline.NewPlan(b, deadline.Phase{Name: "drain"}, deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(time.Second)})
			require.NoError(t, err)
			for _, w := range p.Windows("") {
				assert.True(t, onMonotonic(w.Deadline), "phase %s's deadline %v", w.Name, w.Deadline)
				assert.True(t, onMonotonic(w.Hard), "phase %s's hard deadline %v", w.Name, w.Hard)
			}
			ctx, cancel := p.Context(t.Context(), "drain")
			defer cancel()
			d, ok := ctx.Deadline()
			require.True(t, ok)
			assert.True(t, onMonotonic(d), "the drain phase's context deadline %v", d)
		})
	}
}

// The same deletionTimestamp read again (a drain reads the pod at the preStop call, at
// every new run of the hook and at SIGTERM) changes nothing: Tighten compares the time as
// given with the one it holds. Each taking of a wall clock time onto the monotonic clock
// reads time.Now anew, whose two readings are a few nanoseconds apart, a different few
// each time: compared on the monotonic clock, the same deletionTimestamp came out a
// little earlier or later each read, and Tighten reported a change (and logged it, and
// woke every waiter on Changed) for most of them, moving SIGKILL a few nanoseconds
// earlier each time.
func TestTightenWithTheSameDeletionAgainIsNoChange(t *testing.T) {
	b, err := deadline.New(3600*time.Second, deadline.Config{})
	require.NoError(t, err)
	t0 := time.Now()
	b.OnPreStop(t0)
	deletion := wallOnly(t, t0.Add(30*time.Second))
	require.True(t, b.Tighten(deletion))
	kill := b.Kill()
	changes := 0
	for range 1000 {
		if b.Tighten(wallOnly(t, deletion)) {
			changes++
		}
	}
	assert.Zero(t, changes, "of 1000 reads of the same deletionTimestamp")
	assert.True(t, kill == b.Kill(), "SIGKILL moved from %v to %v", kill, b.Kill())
	assert.True(t, onMonotonic(b.Kill()))
	b.OnSIGTERM(t0.Add(time.Second))
	assert.False(t, b.Tighten(deletion), "after SIGTERM")
	assert.True(t, kill == b.Kill(), "SIGKILL moved from %v to %v", kill, b.Kill())
}

// wallStepped is at as it was read while the node's wall clock was off
// by d (whole seconds) from what it reads now (wallstep.Stepped).
func wallStepped(t *testing.T, at time.Time, d time.Duration) time.Time {
	t.Helper()
	out, err := wallstep.Stepped(at, d)
	require.NoError(t, err)
	return out
}

// The budget's times keep the wall clock reading of when they were taken; a
// deletionTimestamp has only a wall clock reading. Tighten compared the two by the wall
// clock, then took the deletionTimestamp onto the monotonic clock as of now: after a
// step of the node's clock between the two (NTP, a VM resumed), the comparison and the
// floors were off by the step. A step back of 10 s let a deletionTimestamp 5 s after
// SIGKILL pass for an earlier one and moved SIGKILL (and every deadline) 5 s later, past
// the kubelet's, which times the grace on its monotonic clock; a step forward let one
// before SIGTERM through the floors, SIGKILL before SIGTERM + 2 s and the deadline
// before T0.
func TestTightenAfterAStepOfTheClockKeepsItsPromises(t *testing.T) {
	t.Run("a step back: never later", func(t *testing.T) {
		b, err := deadline.New(3600*time.Second, deadline.Config{})
		require.NoError(t, err)
		now := time.Now()
		t0 := wallStepped(t, now, 10*time.Second) // the clock was 10 s fast then
		require.True(t, b.OnPreStop(t0))
		require.True(t, b.Tighten(t0.Add(30*time.Second))) // SIGKILL at T0 + 30 s (Config.KubeletGrace, say)
		kill := b.Kill()
		later := wallOnly(t, now.Add(35*time.Second)) // names T0 + 35 s as the clock reads now
		assert.False(t, b.Tighten(later), "a deletionTimestamp 5 s after SIGKILL tightened the budget")
		assert.True(t, kill.Equal(b.Kill()), "SIGKILL moved %v later", b.Kill().Sub(kill))
	})
	t.Run("a step forward: never before SIGTERM + 2 s or T0", func(t *testing.T) {
		b, err := deadline.New(30*time.Second, deadline.Config{})
		require.NoError(t, err)
		now := time.Now()
		t0 := wallStepped(t, now.Add(-25*time.Second), -10*time.Second) // the clock was 10 s slow then
		require.True(t, b.OnPreStop(t0))
		require.True(t, b.OnSIGTERM(t0.Add(25*time.Second))) // SIGKILL at SIGTERM + 5 s
		sigterm := b.State().SIGTERM
		b.Tighten(wallOnly(t, now.Add(-6*time.Second))) // names SIGTERM - 6 s
		st := b.State()
		assert.True(t, st.Kill.Equal(sigterm.Add(deadline.MinimumGracePeriod)), "SIGKILL at SIGTERM %+v, not + 2 s", st.Kill.Sub(sigterm))
		assert.False(t, st.Deadline.Before(st.Start), "deadline %v before T0", st.Deadline.Sub(st.Start))
	})
}

// The same run of the hook given again (a drain passes the new run's start to OnRestart
// at every read of the pod after it: the run's own read, then the one at SIGTERM; an
// exec hook's run start is ?start= text) is no change, as OnRestart's doc says. Each
// taking of the text onto the monotonic clock reads time.Now anew, so the same start came
// out a few nanoseconds off each time: measured, from 3 to 279 calls in 1000 came out a
// few nanoseconds later and were taken for a new run, reported and logged as a change, and SIGKILL recomputed from
// it, undoing what the budget had learned since: after the kubelet gave up on the hook
// (OnHookAbandoned, SIGKILL 2 s after SIGTERM), SIGKILL moved 14 s later.
func TestRestartWithTheSameRunAgainIsNoChange(t *testing.T) {
	b, err := deadline.New(3600*time.Second, deadline.Config{})
	require.NoError(t, err)
	t0 := time.Now()
	b.OnPreStop(t0)
	run := wallOnly(t, t0.Add(5*time.Second)) // the hook's new run, as an exec hook says it
	require.True(t, b.OnRestart(run, 30*time.Second))
	require.True(t, b.OnHookAbandoned(t0.Add(20*time.Second))) // the kubelet's grace was shorter
	kill := b.Kill()
	require.True(t, kill.Equal(t0.Add(22*time.Second)))
	changes := 0
	for range 1000 {
		if b.OnRestart(wallOnly(t, run), 30*time.Second) {
			changes++
		}
	}
	assert.Zero(t, changes, "of 1000 calls for the same run")
	assert.True(t, kill == b.Kill(), "SIGKILL moved from T0+%v to T0+%v", kill.Sub(t0), b.Kill().Sub(t0))
	assert.True(t, b.OnRestart(run, 20*time.Second), "the same run with a shorter grace")
	assert.True(t, b.State().Restart.Equal(run))
}
