package drain

import (
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// sigterm relays one SIGTERM to ServeSignals, as the kubelet's.
func sigterm() <-chan os.Signal {
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGTERM
	return sigs
}

// A new user's first drain (a review): preserves of 4 s on a node whose
// estimate was left at its default (1 s) lost most sandboxes, and nothing
// said why: the Report's error named the sandboxes, the shortfall was 0,
// and the estimate the plan used was nowhere. Now the preserve phase's
// error and a WARN line say that the preserves took 4 times the estimate
// the plan counted, and which setting that is.
//
//	0 s   SIGTERM, no preStop: grace 8 s, 20 sandboxes of 4 s (no estimate of their own), limit 8
//	4 s   8 preserved; the next 8 cannot finish before the hard deadline (6.5 s):
//	      timed out after 2.5 s, a lower bound of their time, counted too
func TestPreservesMuchLongerThanTheEstimateSayWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 8 * time.Second, latency: time.Second, limit: 8,
			edit: logAt(&logs, slog.LevelWarn)})
		for i := range 20 {
			f.node.Add(&fakesandbox.Sandbox{Name: "vm-" + string(rune('a'+i)), Latency: 4 * time.Second})
		}
		rep := f.d.ServeSignals(t.Context(), sigterm())

		require.Error(t, rep.Err())
		require.NotNil(t, rep.Preserve)
		assert.Equal(t, 8, rep.Preserve.Counts[pause.Preserved])
		p := rep.Phase(PhasePreserve)
		assert.Equal(t, Failed, p.Result)
		assert.Contains(t, p.Error, "; preserves took 4.0 times the estimate the plan counted (the median of 16; the Estimator's was 1s: "+
			"Config.Pause.Estimator, DRAINKIT_PRESERVE_ESTIMATE on the one-call path, or the sandboxes' own)")
		assert.Contains(t, logs.String(), `level=WARN msg="drain: preserves took much longer than the estimate the plan counted: set the estimate to what one takes on this node" times=4.0 measured=16 estimator=1s`)
		// The Report's line says why the phase failed, not only the JSON (a
		// review: "report.preserve=\"failed in 1s\"" and nothing more).
		assert.Contains(t, logs.String(), `report.preserve="failed in 6.5s: pause: 12 of 20 sandboxes not preserved; preserves took 4.0 times`)
	})
}

// Preserves that take their estimate say nothing of it, lost or not.
func TestPreservesThatTakeTheirEstimateSayNothingOfIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 8 * time.Second, latency: 4 * time.Second, limit: 8, sandboxes: 20,
			edit: func(c *Config) { c.Pause.Estimator = deadline.NewEstimator(4 * time.Second) }})
		rep := f.d.ServeSignals(t.Context(), sigterm())
		require.Error(t, rep.Err(), "the grace is short for 20: some are lost")
		assert.NotContains(t, rep.Phase(PhasePreserve).Error, "times the estimate")
	})
}

// Without a preStop call the plan logged at SIGTERM has no count yet: it
// planned one round and said it fit (INFO), and a review found no warning
// for 20 sandboxes that could not all be preserved. Once the gate phase has
// counted them, a work that does not fit is warned of, with the count.
func TestWorkThatDoesNotFitIsWarnedOfOnceCountedWithoutAPreStopCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 5 * time.Second, latency: time.Second, limit: 4, sandboxes: 20,
			edit: logAt(&logs, slog.LevelInfo)})
		rep := f.d.ServeSignals(t.Context(), sigterm())
		assert.Positive(t, rep.Shortfall)
		assert.Contains(t, logs.String(), `msg="drain: SIGTERM: plan"`, "at SIGTERM, one round: it fits")
		assert.Regexp(t, `level=WARN msg="drain: the work does not fit in the time left; phases share it" running=20 shortfall=\S+`, logs.String())
	})
}

// A phase's error on the Report's log line is cut at maxLoggedError bytes,
// on a rune boundary.
func TestClipCutsOnARuneBoundary(t *testing.T) {
	assert.Equal(t, "abc", clip("abc", 3))
	assert.Equal(t, "ab…", clip("abcd", 2))
	assert.Equal(t, "a…", clip("aé", 2), "é is two bytes: not cut in half")
}

// Preserves that hang (they ignore their context) are no measurement of
// how long a preserve takes: a review's 20 hung sandboxes, a 2 s
// estimate, 10 s of grace, read "preserves took 4.3 times the estimate
// ... set the estimate to what one takes on this node", the Preserver's
// wait for them taken for their time. Raising the estimate would have
// changed nothing; the error now says they hung, and which setting frees
// their slots.
func TestHungPreservesAreNotBlamedOnTheEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 10 * time.Second, latency: 2 * time.Second, limit: 8,
			edit: logAt(&logs, slog.LevelWarn)})
		for i := range 20 {
			f.node.Add(&fakesandbox.Sandbox{Name: "vm-" + string(rune('a'+i)), Latency: time.Second,
				Faults: []fakesandbox.Fault{fakesandbox.Hang}, HangFor: time.Hour})
		}
		rep := f.d.ServeSignals(t.Context(), sigterm())

		require.NotNil(t, rep.Preserve)
		assert.Zero(t, rep.Preserve.Counts[pause.Preserved])
		hung := 0
		for _, e := range rep.Preserve.Entries {
			if e.Abandoned() {
				hung++
			}
		}
		assert.Equal(t, 8, hung, "the 8 started hung; the rest never started")
		p := rep.Phase(PhasePreserve)
		assert.NotContains(t, p.Error, "times the estimate")
		assert.Contains(t, p.Error, "; 8 preserve(s) never returned (they ignored their context: a hang, not a slow preserve) and held their slots "+
			"until the Preserver gave up on them: Config.Pause.SandboxTimeout (DRAINKIT_SANDBOX_TIMEOUT on the one-call path) bounds each")
		assert.NotContains(t, logs.String(), "set the estimate")
		assert.Contains(t, logs.String(), `level=WARN msg="drain: preserves hung: they ignored their context and held their slots until the Preserver gave up on them" hung=8`)
		time.Sleep(time.Hour) // the hung Preserves return (HangFor) before the bubble ends
	})
}

// The plan's line at SIGTERM without a preStop call said running=0 with
// 20 sandboxes running (a review of the README's manifest under the real
// kubelet: "preserve.reserve=8s ... running=0", 3 running): no count had
// been made yet, the gate phase makes it after the line, and 0 read as a
// node with nothing to preserve. The line now says that no count was made
// and that the preserve reserve is one round until the gate phase counts.
//
//	0 s   SIGTERM, no preStop call: grace 30 s, 20 sandboxes of 1 s, limit 4
//	      "drain: SIGTERM: plan" ... count="none yet: ..." (no running=0)
//	      the gate phase counts 20; 20/20 preserved
func TestPlanLineAtSIGTERMWithoutAPreStopCallSaysNothingWasCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, latency: time.Second, limit: 4, sandboxes: 20,
			edit: logAt(&logs, slog.LevelInfo)})
		rep := f.d.ServeSignals(t.Context(), sigterm())
		require.NoError(t, rep.Err())
		assert.Equal(t, 20, rep.Preserve.Counts[pause.Preserved])
		line := lineOf(t, logs.String(), `msg="drain: SIGTERM: plan"`)
		assert.NotContains(t, line, "running=0", "20 run")
		assert.Contains(t, line, `count="none yet: the preserve phase's reserve is one round until the gate phase counts"`)
	})
}

// lineOf returns the line of logs that contains s.
func lineOf(t *testing.T, logs, s string) string {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	t.Fatalf("no line has %s:\n%s", s, logs)
	return ""
}
