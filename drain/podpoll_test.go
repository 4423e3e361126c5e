package drain

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// Fault (a review; the kubelet's part measured under the real kubelet,
// internal/realkubelet's TestRealKubeletWithAPIServer/restart): a drain
// with no preStop hook kept the first deletion's SIGKILL after a second,
// shorter deletion. The kubelet does keep it, until it restarts: the new
// kubelet stops the container again with the new grace and kills it that
// long after, and containerd sends no second SIGTERM, so nothing told the
// drain, which was still preserving when SIGKILL came. Without a hook the
// drain now reads the pod every second during the shutdown and, at a
// shorter grace, plans for the earliest restart: after the last read that
// found the first grace, plus the new grace.
//
//	0 s    deleted with 20 s; SIGTERM (no hook): 40 preserves of 1 s, one at a time
//	4.5 s  deleted again with 8 s: a kubelet restarted now kills at 12.5 s
//	5 s    the poll reads it: SIGKILL planned at 4 s (the last read of 20 s) + 8 s
//	       the drain ends before 12 s (before: planned for 20 s)
func TestShorterDeletionWithoutAHookPlansForARestartedKubelet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		api.Delete(t0, 20*time.Second)
		var logs logbuf.Buffer
		var ran []string
		f := newFixture(t, fixtureOpts{grace: 20 * time.Second, margin: time.Second, sandboxes: 40, latency: time.Second, limit: 1,
			steps: []Step{recordStep("ublk", 500*time.Millisecond, &ran)},
			edit: func(c *Config) {
				c.Pod, c.Logger = podOver(t, api, handlerTransport{api}), slog.New(slog.NewTextHandler(&logs, nil))
			}})
		go func() {
			time.Sleep(4500 * time.Millisecond)
			api.Delete(time.Now(), 8*time.Second)
		}()
		rep := f.d.Shutdown(context.Background())

		assert.Equal(t, t0.Add(12*time.Second), rep.Budget.Kill, "SIGKILL at T0+%v", rep.Budget.Kill.Sub(t0))
		assert.True(t, rep.End.Before(t0.Add(12*time.Second)), "the drain ended at T0+%v", rep.End.Sub(t0))
		assert.Positive(t, rep.Headroom)
		assert.Equal(t, []string{"ublk"}, ran, "the device step ran before the new SIGKILL")
		assert.Positive(t, rep.Preserve.Counts[pause.Preserved])
		assert.Positive(t, rep.Preserve.Counts[pause.NotStarted], "what no longer fits is reported: %v", rep.Preserve.Counts)
		assert.Equal(t, 1, strings.Count(logs.String(), "no preStop hook tells this drain"), logs.String())
		assert.Equal(t, 1, strings.Count(logs.String(), `msg="drain: the pod's deletion read"`), "a poll that finds nothing new is not logged at Info")
	})
}

// A drain whose preStop call came has the hook to show it a restarted
// kubelet (it calls the hook again): it neither polls nor moves SIGKILL
// at a shorter deletion, as the kubelet, which keeps its first grace.
func TestShorterDeletionWithAHookIsNotPolled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		api.Delete(t0, 20*time.Second)
		f := newFixture(t, fixtureOpts{grace: 20 * time.Second, margin: time.Second, sandboxes: 40, latency: time.Second, limit: 1,
			edit: func(c *Config) { c.Pod = podOver(t, api, handlerTransport{api}) }})
		f.callPreStop(t.Context(), "?wait=0s").wait(t)
		synctest.Wait()
		reads := api.Reads()
		go func() {
			time.Sleep(4500 * time.Millisecond)
			api.Delete(time.Now(), 8*time.Second)
		}()
		rep := f.d.Shutdown(context.Background())

		assert.Equal(t, t0.Add(20*time.Second), rep.Budget.Kill, "the first deletion's SIGKILL")
		assert.Equal(t, reads+1, api.Reads(), "SIGTERM's read only")
	})
}

// A poll that fails is logged at Warn once, until a read succeeds again,
// and the drain goes on with the budget it has.
func TestPollFailuresAreLoggedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		api.Delete(t0, 20*time.Second)
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 20 * time.Second, margin: time.Second, sandboxes: 10, latency: time.Second, limit: 1,
			edit: func(c *Config) {
				c.Pod, c.Logger = podOver(t, api, handlerTransport{api}), slog.New(slog.NewTextHandler(&logs, nil))
			}})
		go func() {
			time.Sleep(1500 * time.Millisecond)
			api.Refuse(http.StatusServiceUnavailable)
			time.Sleep(5 * time.Second)
			api.Refuse(0)
		}()
		rep := f.d.Shutdown(context.Background())

		assert.Equal(t, 10, rep.Preserve.Counts[pause.Preserved])
		assert.Equal(t, t0.Add(20*time.Second), rep.Budget.Kill)
		require.Equal(t, 1, strings.Count(logs.String(), "could not be read during the shutdown"), logs.String())
		assert.Contains(t, logs.String(), "level=WARN")
	})
}
