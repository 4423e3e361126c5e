package drain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/gaterefusals"
)

// Fault (row 1610): the Report as it stands (Config.progress, which
// internal/lastreport.Progress writes as a drain's unfinished account) left
// out what the reads of the pod had found, which the Report set only at
// the drain's end: a static pod's account said no static_pod (false), the
// one fact that tells a SIGKILL at the restarted kubelet's orphan kill
// (docs/real-kubelet.md) from the manifest's grace running out. Each
// Report told now carries what the final one would of the pod then:
//
//	0 s   start: the mirror pod read, POD_UID its annotation
//	      SIGTERM, no hook: the Report told at the gate's start, and at
//	      each phase's end, says static_pod, as the final one does
func TestReportAsItStandsSaysTheStaticPod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := mirrorPod(staticHash)
		var told []Report
		f, logs := pollFixture(t, api, handlerTransport{api}, 10, fixtureOpts{edit: func(cfg *Config) {
			cfg.Pod = podAs(t, api, staticHash, handlerTransport{api})
			_, err := cfg.Pod.Spec(t.Context())
			require.NoError(t, err)
			cfg.progress = func(rep *Report, next string) { told = append(told, *rep) }
		}})
		rep := shutdownKeepsTheGrace(t, f, logs)
		require.True(t, rep.StaticPod)
		require.NotEmpty(t, told)
		for _, r := range told {
			assert.True(t, r.StaticPod, "the Report told after %d phase(s) says the static pod", len(r.Phases))
			assert.Equal(t, rep.PodUIDUnknown, r.PodUIDUnknown)
		}
	})
}

// Fault (the gate review): the Report as it stands (what
// internal/lastreport.Progress writes as a drain's unfinished account, the
// only one a SIGKILL mid-drain leaves) had no account of the work the gate
// had refused: the gate phase's Detail was made only at the drain's end,
// so a drain killed in its preserve phase said nothing of the creates its
// clients were turned away from, which the final Report counts. Each
// Report told now carries the account as it stands:
//
//	0 s    SIGTERM: the gate closes; a create admitted before it runs 1 s more
//	0.5 s  3 creates refused (the gate phase waits for the one in flight)
//	1 s    the create ends, so does the gate phase: the Report told
//	1.5 s  a fork refused, in the preserve phase (2 sandboxes of 2 s, one at a time)
//	5 s    the preserve phase ends: the Report told
//
// Before: no gate detail in either Report told, refused 4 in the final
// one; after: refused 3 (in the gate phase), then 4, as the final one.
func TestReportAsItStandsCountsTheRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &Gate{}
		told := map[string]Report{} // by the phase that runs next
		f := newFixture(t, fixtureOpts{grace: time.Minute, margin: 5 * time.Second, sandboxes: 2, latency: 2 * time.Second,
			edit: func(c *Config) {
				c.Gate = g
				c.progress = func(rep *Report, next string) { told[next] = *rep }
			}})
		leave, err := g.Enter(Create)
		require.NoError(t, err)
		time.AfterFunc(time.Second, leave)
		refuse := func(c Class, n int) {
			for range n {
				_, err := g.Enter(c)
				require.ErrorIs(t, err, ErrDraining)
			}
		}
		time.AfterFunc(500*time.Millisecond, func() { refuse(Create, 3) })
		time.AfterFunc(1500*time.Millisecond, func() { refuse(Fork, 1) })

		rep := f.d.Shutdown(context.Background())
		require.NoError(t, rep.Err())
		refused := func(r Report) *gaterefusals.Detail {
			t.Helper()
			p := r.Phase(PhaseGate)
			require.NotNil(t, p)
			gd, ok := p.Detail.(*gaterefusals.Detail)
			require.True(t, ok, "the gate phase's detail: %#v", p.Detail)
			return gd
		}

		afterGate := refused(told[PhasePreserve])
		assert.Equal(t, 3, afterGate.Refused)
		assert.Equal(t, []string{"enter create 3"}, afterGate.Kinds())
		assert.Equal(t, PhaseGate, afterGate.FirstPhase)
		assert.Equal(t, PhaseGate, afterGate.LastPhase)
		afterPreserve := refused(told[""])
		assert.Equal(t, refused(*rep), afterPreserve, "the last told says what the final Report says")
		assert.Equal(t, 4, afterPreserve.Refused)
		assert.Equal(t, PhasePreserve, afterPreserve.LastPhase)
	})
}
