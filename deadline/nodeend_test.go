package deadline_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/nodeend"
)

// Graceful node shutdown ends the node at its slice's end, 4 s here,
// whatever the kubelet's SIGKILL after a SIGTERM in the slice's last 2 s:
// the budget's SIGKILL stays the kubelet's, its deadline keeps the margin
// before the node's end.
//
//	0 ...... preStop; the node's end at 4 s (SIGKILL tightened to it)
//	2.7 s .. SIGTERM: the kubelet's SIGKILL at 4.7 s
//	         the deadline: 4 s less min(margin 500 ms, half of 1.3 s) = 3.5 s
func TestBudgetDeadlineFallsBeforeTheNodesEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(30*time.Second, deadline.Config{Margin: 500 * time.Millisecond})
		require.NoError(t, err)
		assert.False(t, nodeend.Set(b, time.Now().Add(4*time.Second)), "no T0 yet: nothing to end")
		t0 := time.Now()
		b.OnPreStop(t0)
		end := t0.Add(4 * time.Second)
		b.Tighten(end)
		changed := b.Changed()
		assert.False(t, nodeend.Set(b, end), "before SIGTERM the end is SIGKILL: the deadline stays")
		assert.Equal(t, t0.Add(3500*time.Millisecond), b.Deadline())

		time.Sleep(2700 * time.Millisecond)
		b.OnSIGTERM(time.Now())
		assert.Equal(t, t0.Add(4700*time.Millisecond), b.Kill(), "the kubelet's 2 s after SIGTERM")
		assert.Equal(t, t0.Add(3500*time.Millisecond), b.Deadline(), "the node's end less the margin")
		select {
		case <-changed: // OnSIGTERM
		default:
			t.Error("SIGTERM changed the budget and did not say so")
		}
		assert.False(t, nodeend.Set(b, end.Add(time.Second)), "a later end changes nothing")
		assert.Equal(t, t0.Add(3500*time.Millisecond), b.Deadline())
		st := b.State()
		assert.True(t, !st.Deadline.Before(st.Start) && !st.Deadline.After(st.Kill), "T0 <= Deadline <= Kill")
	})
}
