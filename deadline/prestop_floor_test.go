package deadline_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/kubeletsim"
)

// The kubelet sends SIGTERM when the preStop hook returns (or at the end
// of its grace, when it gives up on the hook) and SIGKILL no sooner than
// 2 s after it: killContainer raises what the hook left of the grace to
// minimumGracePeriodInSeconds. So once the wait's end falls in the
// kubelet's last 2 s, a later end leaves the SIGTERM work no less time:
// with reserves that fit in the 2 s (less the 1 s margin the budget keeps
// of them), the wait may run to the end of the kubelet's grace. The plan
// before SIGTERM took SIGKILL for T0 + grace whenever the wait ended, and
// ended it early:
//
//	grace 1 s, 700 ms of reserves:  T0 ── wait ends at once ── SIGTERM: SIGKILL T0 + 2 s
//	                        now:    T0 ── wait until T0 + 1 s ── SIGTERM: SIGKILL T0 + 3 s
//	grace 10 s, 300 ms:     T0 ── wait until 8.2 s ── SIGTERM: SIGKILL 10.2 s, 1 s for 300 ms
//	                        now:    T0 ── wait until 10 s ── SIGTERM: SIGKILL 12 s, 1 s for 300 ms
//
// A wait that ends before the kubelet's last 2 s keeps its end (and the
// margin whole). Each case lets the wait run to its deadline, then plays
// the kubelet (internal/kubeletsim's arithmetic, not the budget's):
// SIGTERM when the hook returns, SIGKILL what the kubelet leaves after it.
// Every later phase then gets its whole reserve, no less than the layout
// at T0 said, and no deadline is past that SIGKILL.
func TestPreStopWaitRunsAsLongAsTheKubeletsTwoSecondsAfterSIGTERMHoldTheRest(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name     string
		grace    time.Duration // the budget's
		deletion time.Duration // a deletionTimestamp read at T0, T0 + this (0: none)
		kubelet  time.Duration // the grace the kubelet terminates with
		preserve time.Duration // the later phases' reserves
		exit     time.Duration
		waitEnds time.Duration // when the preStop wait ends, since T0
	}{
		{name: "grace 1 s (terminationGracePeriodSeconds 0 or 1, a hard eviction)", grace: time.Second, kubelet: time.Second,
			preserve: ms(500), exit: ms(200), waitEnds: time.Second},
		{name: "grace 2 s", grace: 2 * time.Second, kubelet: 2 * time.Second,
			preserve: ms(500), exit: ms(200), waitEnds: 2 * time.Second},
		{name: "a deletion's grace of 1 s (kubectl delete --now)", grace: 30 * time.Second, deletion: time.Second, kubelet: time.Second,
			preserve: ms(500), exit: ms(200), waitEnds: time.Second},
		// 300 ms after a 1.5 s margin: the wait would end 1.8 s before
		// SIGKILL, inside the kubelet's last 2 s, where SIGTERM leaves
		// the same 2 s whenever it comes.
		{name: "a wait that ends in the kubelet's last 2 s anyway", grace: 10 * time.Second, kubelet: 10 * time.Second,
			preserve: ms(200), exit: ms(100), waitEnds: 10 * time.Second},
		// The controls: where the wait ends before the kubelet's last 2 s,
		// SIGTERM leaves more than the 2 s would, and the rule is as it was.
		{name: "a wait that ends before the kubelet's last 2 s", grace: 30 * time.Second, kubelet: 30 * time.Second,
			preserve: ms(500), exit: ms(200), waitEnds: ms(26300)},
		{name: "reserves past what the 2 s hold", grace: 30 * time.Second, kubelet: 30 * time.Second,
			preserve: ms(1000), exit: ms(500), waitEnds: ms(25500)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tl := &timeline{b: newBudget(t, tc.grace), t0: time.Now(), running: new(atomic.Int64), wake: make(chan struct{}, 1)}
				p := newPlan(t, tl.b, deadline.Phase{Name: "drain"},
					deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(tc.preserve)},
					deadline.Phase{Name: "exit", Reserve: deadline.Fixed(tc.exit)})
				tl.b.OnPreStop(tl.t0)
				if tc.deletion > 0 {
					require.True(t, tl.b.Tighten(tl.t0.Add(tc.deletion)))
				}

				ahead := p.Windows("drain") // the plan laid out at T0, for the Event and the log
				end := preStopWait(tl, p)
				assert.Equal(t, tc.waitEnds, end.Sub(tl.t0), "the preStop wait's end")
				assert.Equal(t, end, ahead[0].Deadline, "the wait ends where the plan laid out at T0 said")

				// The kubelet: the hook returned, SIGTERM now, SIGKILL what
				// it leaves of its grace, at least 2 s.
				kill := end.Add(kubeletsim.Remaining(tc.kubelet, end.Sub(tl.t0)))
				require.True(t, tl.b.OnSIGTERM(end))
				assert.False(t, tl.b.Kill().After(kill), "the budget's SIGKILL %v is past the kubelet's %v",
					tl.b.Kill().Sub(tl.t0), kill.Sub(tl.t0))
				for i, w := range p.Windows("preserve") {
					assert.Zero(t, w.Short, "%s is short after SIGTERM at T0 + %v", w.Name, end.Sub(tl.t0))
					assert.False(t, w.Deadline.Before(ahead[i+1].Deadline), "%s: less than the layout at T0 said", w.Name)
					assert.False(t, w.Hard.After(kill), "%s: work over by %v, SIGKILL at %v", w.Name, w.Hard.Sub(tl.t0), kill.Sub(tl.t0))
				}
			})
		})
	}
}

// Plan.Shortfall counted the reserves from T0 to the budget's deadline
// alone: a grace of 1 s leaves 500 ms after its margin, one round of 1 s
// was 500 ms short, and drain.New refused the plan. But the kubelet leaves
// 2 s after SIGTERM whenever the preStop hook returns (the budget keeps
// 1 s of them), so the wait may run until the kubelet gives up on the hook
// and the round still fits, as the plan lays it out. 1.2 s do not fit
// either way: the shortfall is what that layout lacks, 200 ms, the less
// of the two (row 2900).
func TestShortfallCountsTheKubeletsTwoSecondsAfterSIGTERM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		round := time.Second
		b := newBudget(t, time.Second)
		p := newPlan(t, b, deadline.Phase{Name: "drain"},
			deadline.Phase{Name: "preserve", Reserve: func() time.Duration { return round }})
		assert.Zero(t, p.Shortfall(), "before any event (drain.New)")
		t0 := time.Now()
		b.OnPreStop(t0)
		assert.Zero(t, p.Shortfall(), "at the preStop call")
		ws := p.Windows("")
		assert.Equal(t, time.Second, ws[0].Deadline.Sub(t0), "the wait until the kubelet gives up on the hook")
		assert.Equal(t, round, ws[1].Deadline.Sub(ws[1].Start), "then the round")
		assert.Zero(t, ws[1].Short)

		round = 1200 * time.Millisecond
		assert.Equal(t, 200*time.Millisecond, p.Shortfall(), "1.2 s less the 1 s SIGTERM at the wait's end leaves, not the 500 ms from T0 (700 ms)")

		round = time.Second
		b.OnSIGTERM(t0) // no wait: SIGTERM at T0, SIGKILL 2 s later
		assert.Zero(t, p.Shortfall(), "the deadline 1 s after SIGTERM")
	})
}
