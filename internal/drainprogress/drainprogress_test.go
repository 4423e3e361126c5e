package drainprogress_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/drainprogress"
	"github.com/drainkit/drainkit/pause"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// told is one call of fn: the Report as it stood, copied from what fn was given.
type told struct {
	next      string
	phases    []string // the phases ended, in order
	preserved int      // the Preserver's account: sandboxes preserved
	hasBudget bool     // the budget now: its SIGKILL known
}

// A drain made with a Set config calls fn on SIGTERM at the start of its
// phases (next "gate", no phase ended) and at each phase's end, with the
// phases ended so far, the Preserver's account once the preserve phase ended,
// and the phase that runs next ("" after the last), in order.
func TestSetCallsFnAtTheStartAndAtEachPhasesEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := deadline.New(60*time.Second, deadline.Config{})
		require.NoError(t, err)
		node := draintest.NewNode()
		node.AddN("sb", 3, time.Second)
		var ran []string
		cfg := drain.Config{Budget: budget, Sandboxes: node, Steps: []drain.Step{
			drain.NewStep(deadline.Phase{Name: "net", Reserve: deadline.Fixed(5 * time.Second)}, func(context.Context) (any, error) {
				ran = append(ran, "net")
				return nil, nil
			}),
		}}
		var calls []told
		drainprogress.Set(&cfg, func(rep any, next string) {
			r, ok := rep.(*drain.Report)
			require.True(t, ok, "rep is a %T", rep)
			c := told{next: next, hasBudget: !r.Budget.Kill.IsZero()}
			for _, p := range r.Phases {
				c.phases = append(c.phases, p.Name)
			}
			if r.Preserve != nil {
				c.preserved = r.Preserve.Counts[pause.Preserved]
			}
			if next == "net" {
				assert.Empty(t, ran, "told the preserve phase's end before the step ran")
			}
			calls = append(calls, c)
		})
		d, err := drain.New(cfg)
		require.NoError(t, err)
		budget.OnSIGTERM(time.Now())
		rep := d.Shutdown(context.Background())
		require.Equal(t, 3, rep.Preserve.Counts[pause.Preserved])

		assert.Equal(t, []told{
			{next: drain.PhaseGate, hasBudget: true},
			{next: drain.PhasePreserve, phases: []string{drain.PhaseGate}, hasBudget: true},
			{next: "net", phases: []string{drain.PhaseGate, drain.PhasePreserve}, preserved: 3, hasBudget: true},
			{next: "", phases: []string{drain.PhaseGate, drain.PhasePreserve, "net"}, preserved: 3, hasBudget: true},
		}, calls)
	})
}

// A cfg that is not a *drain.Config panics naming its type, as the doc says:
// a drain.Config passed by value would set nothing.
func TestSetPanicsNamingAnotherType(t *testing.T) {
	for _, cfg := range []any{drain.Config{}, "cfg"} {
		t.Run(fmt.Sprintf("%T", cfg), func(t *testing.T) {
			defer func() {
				r := recover()
				require.NotNil(t, r, "no panic")
				assert.Contains(t, fmt.Sprint(r), fmt.Sprintf("%T", cfg))
			}()
			drainprogress.Set(cfg, func(any, string) {})
		})
	}
}

// In a program that does not link drain, Set panics saying so, naming cfg's type.
func TestSetWithoutDrainPanicsSayingSo(t *testing.T) {
	assert.PanicsWithValue(t, "drainprogress: no drain in this program to set on *drain.Config", func() {
		drainprogress.Unlinked(&drain.Config{}, func(any, string) {})
	})
}
