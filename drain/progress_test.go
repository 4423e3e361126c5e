package drain

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
