package httpsource

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/pause"
)

// Fault: a pause cut with no answer after an earlier pause of the same
// sandbox that got none either (the preserve phase's, cut by its hard
// deadline, which the server goes on with) said only its own cut: the
// Source named the pause before it when that one was answered with a
// failure (a 5xx, a 409 naming a pause in progress: row 1760) and not
// when it got no answer, and the earlier no-answer was overwritten in its
// record too. The final sweep's entry, which replaces the preserve phase's
// in the supervisor's Report, then read as one slow pause of the sweep's,
// where the server had had the sandbox's pause since the preserve phase
// began. Both are named now, the first of them kept. AgentENV's double,
// pauses of 30 s, in virtual time:
//
//	0 s    the preserve phase's pause (phase 1 s, hard 2 s)
//	2 s    its hard deadline cuts it: TimedOut, "no answer"
//	2 s    the sweep's pause joins the server's (phase 1 s, hard 2 s)
//	4 s    cut too: before, its error names its own cut alone; now also
//	       "the pause before it got no answer either" and the first's cut
func TestAPauseCutAfterOneWithNoAnswerNamesThatOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := fakeagentenv.New(fakeagentenv.Config{PauseBase: 30 * time.Second})
		require.NoError(t, err)
		sb, err := srv.Create(1024)
		require.NoError(t, err)
		src := inProcess(t, srv.Handler(), AgentENV())

		preserve, err := pause.New(src, pause.Config{})
		require.NoError(t, err)
		rep := preserve.Run(ctxWithDeadline(t, time.Second), time.Now().Add(2*time.Second))
		first := entry(t, rep, sb.SandboxID)
		require.Equal(t, pause.TimedOut, first.Outcome, first.Error)
		require.Contains(t, first.Error, "no answer before its context ended")

		sweep, err := pause.New(pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			return []pause.Sandbox{src.Sandbox(sb.SandboxID)}, nil // the sweep's: not paused yet
		}), pause.Config{})
		require.NoError(t, err)
		start := time.Now()
		rep = sweep.Run(ctxWithDeadline(t, time.Second), start.Add(2*time.Second))

		e := entry(t, rep, sb.SandboxID)
		assert.Equal(t, pause.TimedOut, e.Outcome, e.Error)
		assert.Contains(t, e.Error, "no answer before its context ended", "the sweep's own cut")
		assert.Contains(t, e.Error, "the pause before it got no answer either", "the preserve phase's, which the server has gone on with")
		time.Sleep(30 * time.Second) // the server's pause ends
	})
}
