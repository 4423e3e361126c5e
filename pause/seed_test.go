package pause_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// runSeed runs the AgentENV seed at full scale: 200 running sandboxes,
// 2 s per pause, 600 s left, at the given limit. It returns the Report,
// how long Run took and the node. It must run inside a synctest bubble.
func runSeed(t *testing.T, limit int) (*pause.Report, time.Duration, *fakesandbox.Node) {
	t.Helper()
	node := fakesandbox.NewNode()
	node.AddN("sb", 200, 2*time.Second)
	p, err := pause.New(node, pause.Config{Limit: limit})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 600*time.Second)
	defer cancel()
	start := time.Now()
	rep := p.Run(ctx, time.Time{})
	return rep, time.Since(start), node
}

// The seed one at a time takes 400 s; 16 at a time, 13 rounds = 26 s.
func TestSeedPreservesAllInParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep, took, node := runSeed(t, 16)
		assert.Equal(t, 200, rep.Counts[pause.Preserved])
		assert.Equal(t, 0, rep.Lost())
		assert.Len(t, rep.Entries, 200)
		assert.Equal(t, 26*time.Second, took, "13 rounds of 16 x 2 s")
		assert.Equal(t, 16, node.MaxInFlight())
		assert.Equal(t, 2, rep.Passes, "the second pass finds nothing new")
		t.Logf("limit 16: %d preserved in %v", rep.Counts[pause.Preserved], took)
	})
}

func TestSeedSequentialTakes400Seconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep, took, node := runSeed(t, 1)
		assert.Equal(t, 200, rep.Counts[pause.Preserved])
		assert.Equal(t, 400*time.Second, took)
		assert.Equal(t, 1, node.MaxInFlight())
		t.Logf("limit 1: %d preserved in %v", rep.Counts[pause.Preserved], took)
	})
}
