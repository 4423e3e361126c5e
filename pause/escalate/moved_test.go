package escalate_test

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/escalate"
)

// Fault (row 1040): Stop fixed the end of its wait after the signal when it began, KillWait
// before the deadline its context had then. A drain's budget that moves SIGKILL earlier
// mid-wait (a deletion with a shorter grace read then) moves the Deadline its Preserves'
// contexts report (pause.Preserver.Tighten) and cuts them there: the wait ran on to the
// cut, SIGKILL went out as the context ended, with no time left to see its effect, and
// every sandbox that ignored SIGTERM ended "not seen to exit", though each was killed. The
// wait now follows the context's Deadline as it moves: SIGKILL KillWait before the new
// deadline, and its wait sees the exit.
//
//	0 s    8 sandboxes SIGTERMed (they ignore it); hard deadline 60 s: SIGKILL due at 55 s
//	10.2 s Tighten: the hard deadline moves to 30 s
//	25 s   SIGKILL (before: 30 s, as the contexts were cut)
//	25.01s each exits                       -> needed SIGKILL, none unknown
func TestWaitAfterTheSignalFollowsADeadlineMovedEarlier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 8
		var fakes []*fakeTarget
		var sbs []pause.Sandbox
		for i := range n {
			f := newFake(map[syscall.Signal]time.Duration{syscall.SIGKILL: 10 * time.Millisecond})
			fakes = append(fakes, f)
			sbs = append(sbs, &escalate.Sandbox{Name: "sb-" + string(rune('a'+i)), Target: f})
		}
		p, err := pause.New(listOnce(sbs...), pause.Config{Limit: n})
		require.NoError(t, err)
		start := time.Now()
		ctx, cancel := context.WithDeadline(t.Context(), start.Add(time.Minute))
		defer cancel()
		time.AfterFunc(10200*time.Millisecond, func() { p.Tighten(start.Add(30 * time.Second)) })
		rep := p.Run(ctx, start.Add(time.Minute))

		unknown, killed := 0, 0
		for _, e := range rep.Entries {
			switch {
			case strings.Contains(e.Error, "not seen to exit"):
				unknown++
			case strings.Contains(e.Error, "needed SIGKILL"):
				killed++
			}
			assert.Equal(t, pause.Failed, e.Outcome, "%s: %s", e.ID, e.Error)
		}
		t.Logf("%d killed, %d unknown; SIGKILL at %v", killed, unknown, fakes[0].sent())
		assert.Equal(t, 0, unknown, "killed sandboxes reported not seen to exit")
		assert.Equal(t, n, killed)
		for _, f := range fakes {
			assert.Equal(t, []string{"terminated@00.000", "continued@00.000", "killed@25.000"}, f.sent(), "SIGKILL KillWait before the moved deadline")
		}
		assert.Equal(t, 25010*time.Millisecond, time.Since(start), "the Run ends when the kill waits see the exits")
	})
}

// The same with a real child that ignores SIGTERM, preserved by a real Preserver whose
// hard deadline a Tighten moves to 2 s just after the SIGTERM went out, with KillWait 1 s:
// SIGKILL goes out a second before the new deadline, the child is killed and reaped, and
// the Report says it needed SIGKILL. Before, SIGKILL went out at 2 s, as the Preserve's
// context was cut, and the Report said timed_out, "not seen to exit", of a child killed.
func TestKilledChildIsSeenKilledWhenTheDeadlineMovedEarlier(t *testing.T) {
	cmd, state := child(t, "ignore")
	real := escalate.Cmd(cmd)
	var p *pause.Preserver
	start := time.Now()
	target := escalate.Funcs{
		SignalFunc: func(ctx context.Context, sig syscall.Signal) error {
			err := real.Signal(ctx, sig)
			if sig == syscall.SIGTERM {
				p.Tighten(start.Add(2 * time.Second)) // a deletion with a shorter grace, read now
			}
			return err
		},
		WaitFunc:   real.Wait,
		ExitedFunc: real.Exited,
	}
	sb := &escalate.Sandbox{Name: "ignores", Target: target, Policy: escalate.Policy{KillWait: time.Second}}
	p, err := pause.New(listOnce(sb), pause.Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithDeadline(t.Context(), start.Add(30*time.Second))
	defer cancel()
	rep := p.Run(ctx, start.Add(30*time.Second))
	require.Len(t, rep.Entries, 1)
	e := rep.Entries[0]
	t.Logf("after %v: %s: %s", time.Since(start), e.Outcome, e.Error)
	assert.Equal(t, pause.Failed, e.Outcome, "killed, and seen killed: not timed out")
	assert.Contains(t, e.Error, "needed SIGKILL")
	assert.NotContains(t, e.Error, "not seen to exit")
	require.NotNil(t, cmd.ProcessState, "the child was reaped within the kill wait")
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "%v", ws)
	assert.NoFileExists(t, state)
}

// listOnce lists sbs, then nothing: a node whose sandboxes are all there at the drain.
func listOnce(sbs ...pause.Sandbox) pause.Lister {
	listed := false
	return pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
		if listed {
			return nil, nil
		}
		listed = true
		return sbs, nil
	})
}

// Fault (row 1151): the wait after the signal learned that its context's Deadline moved by
// reading it again every tenth of KillWait, so it followed a move up to that late: a
// Deadline moved to where SIGKILL was due already got its SIGKILL at the next reread, not
// at the move, and the kill wait lost as much; and a wait that nothing moved read its
// Deadline all the same: here 52 times in 20.5 s. The Deadline a Preserver's (and a drain
// step's) context follows now says when it moves, and the wait rereads it then.
//
//	0 s     SIGTERM (ignored); hard deadline 60 s, KillWait 5 s: SIGKILL due at 55 s
//	20.2 s  Tighten to 25 s: SIGKILL due at 20 s, so at once
//	20.2 s  SIGKILL (before: 20.5 s, the wait's next reread)
//	20.21 s it exits: needed SIGKILL
func TestSIGKILLGoesOutAsTheDeadlineMovesNotAtTheNextReread(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(map[syscall.Signal]time.Duration{syscall.SIGKILL: 10 * time.Millisecond})
		var reads atomic.Int64
		sb := counting{Sandbox: &escalate.Sandbox{Name: "sb", Target: f}, reads: &reads}
		p, err := pause.New(listOnce(sb), pause.Config{})
		require.NoError(t, err)
		start := time.Now()
		ctx, cancel := context.WithDeadline(t.Context(), start.Add(time.Minute))
		defer cancel()
		time.AfterFunc(20200*time.Millisecond, func() { p.Tighten(start.Add(25 * time.Second)) })
		rep := p.Run(ctx, start.Add(time.Minute))
		require.Len(t, rep.Entries, 1)
		assert.Contains(t, rep.Entries[0].Error, "needed SIGKILL")
		assert.Equal(t, []string{"terminated@00.000", "continued@00.000", "killed@20.200"}, f.sent(), "SIGKILL as the deadline moved")
		t.Logf("the Deadline read %d times in %v", reads.Load(), time.Since(start))
		assert.Less(t, reads.Load(), int64(20), "read when laid out, sent, waited for and moved, not every tenth of KillWait (52 before)")
	})
}

// counting is a Sandbox whose Preserve's context counts the reads of its Deadline.
type counting struct {
	pause.Sandbox
	reads *atomic.Int64
}

func (c counting) Preserve(ctx context.Context) error {
	return c.Sandbox.Preserve(countingCtx{ctx, c.reads})
}

// countingCtx is a context that counts the reads of its Deadline.
type countingCtx struct {
	context.Context
	reads *atomic.Int64
}

func (c countingCtx) Deadline() (time.Time, bool) {
	c.reads.Add(1)
	return c.Context.Deadline()
}
