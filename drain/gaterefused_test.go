package drain

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/gaterefusals"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// The gate phase's account of refusals says when the first and the last
// came, and in which phase: here one in the preserve phase, 1 s after
// SIGTERM (its pause takes 2 s), and the last in a step 1 s into it.
func TestTheGateDetailDatesTheFirstAndLastRefusalByPhase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &Gate{}
		var late time.Time
		f := newFixture(t, fixtureOpts{grace: time.Minute, margin: 5 * time.Second, sandboxes: 1, latency: 2 * time.Second,
			steps: []Step{step("late", 3*time.Second, func(ctx context.Context) error {
				time.Sleep(time.Second)
				late = time.Now()
				for range 2 {
					if _, err := g.Enter(Create); err == nil {
						return fmt.Errorf("a create admitted in a step")
					}
				}
				return nil
			})},
			edit: func(c *Config) { c.Gate = g }})
		start := time.Now()
		rep := f.shutdownMeanwhile(time.Second, func() {
			_, err := g.Enter(Fork)
			require.ErrorIs(t, err, ErrDraining)
		})
		require.NoError(t, rep.Err())

		gd, ok := rep.Phase(PhaseGate).Detail.(*gaterefusals.Detail)
		require.True(t, ok, "%T", rep.Phase(PhaseGate).Detail)
		assert.Equal(t, 3, gd.Refused)
		assert.Equal(t, map[string]map[string]int{string(byEnter): {string(Fork): 1, string(Create): 2}}, gd.By)
		assert.Equal(t, start.Add(time.Second), gd.First)
		assert.Equal(t, PhasePreserve, gd.FirstPhase)
		assert.Equal(t, late, gd.Last)
		assert.Equal(t, "late", gd.LastPhase)
		assert.Equal(t, start.Add(3*time.Second), late, "the pause took 2 s, the step waited 1 s")
	})
}

// A drain with nothing refused says so: refused 0 in the Detail and the
// log line, and no times.
func TestTheGateDetailSaysNothingWasRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: time.Minute, margin: 5 * time.Second})
		rep := f.d.Shutdown(context.Background())
		gd, ok := rep.Phase(PhaseGate).Detail.(*gaterefusals.Detail)
		require.True(t, ok)
		assert.Equal(t, &gaterefusals.Detail{By: map[string]map[string]int{}}, gd)
		var line logbuf.Buffer
		slog.New(slog.NewTextHandler(&line, nil)).Info("drain: shutdown finished", "report", rep)
		assert.Contains(t, line.String(), "report.refused=0 ")
		assert.NotContains(t, line.String(), "first_refused")
	})
}

// The account keeps counts, not requests, and a bounded number of kinds:
// a classify that makes a class of each path (a request's sandbox ID)
// cannot grow it with every request.
func TestTheAccountOfRefusalsIsBounded(t *testing.T) {
	g := &Gate{}
	g.Close()
	for i := range 1000 {
		_, err := g.Enter(Class(fmt.Sprintf("create-sb-%d", i)))
		require.Error(t, err)
	}
	r := g.refusals()
	assert.Equal(t, 1000, r.n)
	assert.Len(t, r.by[string(byEnter)], gaterefusals.MaxKinds+1)
	assert.Equal(t, 1000-gaterefusals.MaxKinds, r.by[string(byEnter)][string(refusedOther)])
}

// Fault: a refusal by a gate the server's own code closed before the drain
// began (it stops taking work at its own signal, then calls Shutdown) came
// in no phase of the drain, and the log line dated it "TIME ()". It is
// counted, and named "before the drain"; a later one its phase.
func TestARefusalBeforeTheDrainIsNamedSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &Gate{}
		f := newFixture(t, fixtureOpts{grace: time.Minute, margin: 5 * time.Second, sandboxes: 1, latency: 2 * time.Second,
			edit: func(c *Config) { c.Gate = g }})
		g.Close()
		before := time.Now()
		_, err := g.Enter(Create)
		require.ErrorIs(t, err, ErrDraining)
		time.Sleep(time.Second)
		done := make(chan *Report)
		go func() { done <- f.d.Shutdown(context.Background()) }()
		time.Sleep(time.Second) // in the preserve phase: its pause takes 2 s
		during := time.Now()
		_, err = g.Enter(Fork)
		require.ErrorIs(t, err, ErrDraining)
		rep := <-done
		require.NoError(t, rep.Err())

		gd, ok := rep.Phase(PhaseGate).Detail.(*gaterefusals.Detail)
		require.True(t, ok, "%T", rep.Phase(PhaseGate).Detail)
		assert.Equal(t, 2, gd.Refused)
		assert.Equal(t, before, gd.First)
		assert.Empty(t, gd.FirstPhase, "no phase ran")
		assert.Equal(t, PhasePreserve, gd.LastPhase)
		var line logbuf.Buffer
		slog.New(slog.NewTextHandler(&line, nil)).Info("drain: shutdown finished", "report", rep)
		assert.Contains(t, line.String(), fmt.Sprintf(`report.first_refused="%s (before the drain)"`, before.Format(time.RFC3339Nano)))
		assert.Contains(t, line.String(), fmt.Sprintf(`report.last_refused="%s (preserve)"`, during.Format(time.RFC3339Nano)))
	})
}
