package mixbench

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// default-fixed/adaptive compares the adaptive limit with a fixed limit at
// the level the adaptive Run starts from. That level is where a Run starts,
// not what Preserver.Limit reports: a cold Preserver reports 1, what a
// reserve may count on (docs/faults.md row 940), and the metric then
// compared the adaptive Run with the seed's one at a time.
func TestDefaultLimitIsWhereAnAdaptiveRunStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 64, time.Second)
		p, err := pause.New(node, pause.Config{})
		require.NoError(t, err)
		done := make(chan *pause.Report)
		go func() { done <- p.Run(t.Context(), time.Time{}) }()
		synctest.Wait() // the first round started, none finished
		assert.Equal(t, node.InFlight(), defaultLimit(), "the first round runs at the start")
		require.Equal(t, 64, (<-done).Counts[pause.Preserved])
	})
}
