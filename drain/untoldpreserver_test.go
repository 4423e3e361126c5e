package drain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/pause"
)

// hardKeepingPreserver is a user's Preserver with no Tighten: its
// in-flight preserves run to the hard deadline it was given, as Run's
// contract lets them, and it looks at nothing else (not ctx).
type hardKeepingPreserver struct{ returned chan struct{} }

func (p *hardKeepingPreserver) Run(_ context.Context, hard time.Time) *pause.Report {
	defer close(p.returned)
	time.Sleep(time.Until(hard))
	return &pause.Report{}
}

func (p *hardKeepingPreserver) Limit() int                     { return 1 }
func (p *hardKeepingPreserver) Estimator() *deadline.Estimator { return nil }

// A Preserver that cannot be told a moved deadline (no Tighten) and whose
// preserves keep the hard deadline it was given is waited for only until
// the hard deadline the budget moved, not the one it was called with: the
// critical ublk step after it keeps its reserve before the new SIGKILL.
//
//	0 s    SIGTERM (grace 60 s, margin 1 s): the Preserver runs, its hard
//	       deadline the window's (56 s: ublk's 3 s reserve before 59 s)
//	1 s    the budget moves SIGKILL to 10 s: the phase's context ends at
//	       its new deadline, which the Preserver does not look at
//	~6 s   the new hard deadline: drain gives up on the Preserver
//	       (Abandoned) and the ublk step runs with its 3 s, before 9 s
func TestAPreserverWithNoTightenIsWaitedForOnlyToTheMovedHardDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &hardKeepingPreserver{returned: make(chan struct{})}
		var ublkAt time.Time
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: time.Second,
			steps: []Step{stepOf("ublk", 3*time.Second, true, func(context.Context) error { ublkAt = time.Now(); return nil })},
			edit:  func(c *Config) { c.Preserver = p }})
		rep := f.shutdownMeanwhile(time.Second, func() { f.budget.Tighten(f.budget.State().SIGTERM.Add(10 * time.Second)) })
		t.Logf("preserve: %s %s; ublk began at +%v", rep.Phase(PhasePreserve).Result, rep.Phase(PhasePreserve).Error, ublkAt.Sub(rep.Budget.SIGTERM))
		require.False(t, ublkAt.IsZero(), "the ublk step ran")
		assert.LessOrEqual(t, ublkAt.Sub(rep.Budget.SIGTERM), 6*time.Second+returnSlack, "the ublk step began with its reserve before the new SIGKILL")
		assert.Equal(t, Abandoned, rep.Phase(PhasePreserve).Result)
		<-p.returned // at the old hard deadline, its report dropped
	})
}
