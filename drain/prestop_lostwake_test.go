package drain

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// onRecord is a slog handler that calls do, once, with the first record
// whose message starts with prefix, on the goroutine that logs it.
type onRecord struct {
	prefix string
	once   *sync.Once
	do     func()
}

func (h onRecord) Enabled(context.Context, slog.Level) bool { return true }
func (h onRecord) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(h.do)
	}
	return nil
}
func (h onRecord) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onRecord) WithGroup(string) slog.Handler      { return h }

// A change of the budget that lands after the preStop wait has read its
// deadline and before it waits (here: the pod's read saying its grace is
// shorter, landing as the wait logs its progress) ends the wait at once.
// Before, the wait asked the budget for its change channel after the
// change had closed the old one: it slept a whole PollInterval (1 s) past
// a drain deadline that had already passed. Found in CI: a 4 s grace's
// hook answered at 1 s instead of 0.4 s, and 4 of 16 sandboxes were lost
// (TestKubeletsOwnTerminationPlansForTheKubeletGrace, once in 40 runs).
//
//	0 ....... preStop: one sandbox runs, the 60 s budget's wait
//	10 s .... the wait's first progress line; SIGKILL moved to 12 s
//	10 s .... the drain deadline has passed: the hook answers (was 11 s)
func TestBudgetChangeBetweenTheWaitsReadAndItsSleepIsNotMissed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f *fixture
		var moved time.Time
		h := onRecord{prefix: "drain: preStop wait:", once: new(sync.Once), do: func() {
			moved = time.Now()
			f.budget.Tighten(moved.Add(2 * time.Second))
		}}
		// 1.5 s to preserve it: more than the kubelet's 2 s after SIGTERM
		// hold (less the budget's 1 s margin of them), so the drain
		// deadline is the budget's less the reserve, past at 10 s.
		f = newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 2 * time.Second, sandboxes: 1,
			latency: 1500 * time.Millisecond, limit: 1, edit: func(c *Config) { c.Logger = slog.New(h) }})
		start := time.Now()
		call := f.callPreStop(t.Context(), "")
		<-call.done
		assert.Equal(t, start.Add(progressInterval), moved, "the budget moved at the first progress line")
		assert.Equal(t, moved, call.at, "the hook answered when the budget moved, past its drain deadline")
		f.d.Shutdown(context.Background())
	})
}
