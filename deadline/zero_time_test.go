package deadline_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
)

// Fault (a review of deadline): OnPreStop, OnSIGTERM, OnHookAbandoned and
// OnRestart took the zero time.Time for an event in year 1, so the budget's
// SIGKILL and deadline had passed two thousand years ago and a drain
// preserved nothing. The zero value is the safe path: a zero time is now,
// on the monotonic clock, as time.Now() would have been.
func TestZeroEventTimeIsNow(t *testing.T) {
	const G = 60 * time.Second
	tests := []struct {
		name   string
		events func(b *deadline.Budget) bool // the zero-time call's report
		anchor deadline.Anchor
		start  time.Duration // from the bubble's start
		kill   time.Duration
	}{
		{"OnPreStop", func(b *deadline.Budget) bool {
			time.Sleep(5 * time.Second)
			return b.OnPreStop(time.Time{})
		}, deadline.AnchorPreStop, s(5), s(65)},
		{"OnSIGTERM, unanchored", func(b *deadline.Budget) bool {
			time.Sleep(5 * time.Second)
			return b.OnSIGTERM(time.Time{})
		}, deadline.AnchorSIGTERM, s(5), s(65)},
		{"OnSIGTERM after the hook", func(b *deadline.Budget) bool {
			b.OnPreStop(time.Now())
			time.Sleep(10*time.Second + 500*time.Millisecond)
			return b.OnSIGTERM(time.Time{})
		}, deadline.AnchorPreStop, 0, s(60.5)}, // SIGTERM + 60 - 10 whole seconds
		{"OnHookAbandoned", func(b *deadline.Budget) bool {
			b.OnPreStop(time.Now())
			time.Sleep(30 * time.Second)
			return b.OnHookAbandoned(time.Time{})
		}, deadline.AnchorPreStop, 0, s(32)}, // SIGTERM + 2 s
		{"OnRestart, unanchored", func(b *deadline.Budget) bool {
			time.Sleep(5 * time.Second)
			return b.OnRestart(time.Time{}, 30*time.Second)
		}, deadline.AnchorPreStop, s(5), s(35)},
		{"OnRestart after the hook", func(b *deadline.Budget) bool {
			b.OnPreStop(time.Now())
			time.Sleep(10 * time.Second)
			return b.OnRestart(time.Time{}, 30*time.Second)
		}, deadline.AnchorPreStop, 0, s(40)}, // the new run from now
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				begin := time.Now()
				b, err := deadline.New(G, deadline.Config{Margin: time.Second})
				require.NoError(t, err)
				require.True(t, tc.events(b), "the zero time is an event, now")
				st := b.State()
				assert.Equal(t, tc.anchor, st.Anchor)
				assert.Equal(t, tc.start, st.Start.Sub(begin), "T0")
				assert.Equal(t, tc.kill, st.Kill.Sub(begin), "SIGKILL")
				assert.Positive(t, b.Remaining(), "the deadline has not passed")
				if tc.name != "OnPreStop" && tc.name[:9] != "OnRestart" {
					assert.Equal(t, time.Now(), st.SIGTERM, "SIGTERM is now")
					assert.False(t, b.OnSIGTERM(time.Time{}), "a second SIGTERM changes nothing")
					assert.Equal(t, tc.kill, b.Kill().Sub(begin))
				}
			})
		})
	}
}

// The zero time is time.Now() itself, monotonic clock reading included
// (synctest's clock has none, so this runs on the real one and asserts no
// timing): T0, SIGTERM and SIGKILL are compared by that reading, which no
// step of the node's clock moves.
func TestZeroEventTimeIsOnTheMonotonicClock(t *testing.T) {
	for name, event := range map[string]func(b *deadline.Budget){
		"OnPreStop":       func(b *deadline.Budget) { b.OnPreStop(time.Time{}) },
		"OnSIGTERM":       func(b *deadline.Budget) { b.OnSIGTERM(time.Time{}) },
		"OnHookAbandoned": func(b *deadline.Budget) { b.OnHookAbandoned(time.Time{}) },
		"OnRestart":       func(b *deadline.Budget) { b.OnRestart(time.Time{}, time.Minute) },
	} {
		t.Run(name, func(t *testing.T) {
			b, err := deadline.New(time.Hour, deadline.Config{})
			require.NoError(t, err)
			event(b)
			st := b.State()
			assert.True(t, onMonotonic(st.Start), "T0 %s", st.Start)
			assert.True(t, onMonotonic(st.Kill), "SIGKILL %s", st.Kill)
			if name != "OnPreStop" && name != "OnRestart" {
				assert.True(t, onMonotonic(st.SIGTERM), "SIGTERM %s", st.SIGTERM)
			}
		})
	}
}
