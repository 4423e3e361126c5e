package wallstep_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/wallstep"
)

// A stepped time keeps its monotonic reading and moves its wall clock
// reading by the step, either way; a time with no monotonic reading, or a
// step that is not whole seconds, is refused.
func TestSteppedMovesTheWallClockReadingAlone(t *testing.T) {
	now := time.Now()
	for _, d := range []time.Duration{10 * time.Second, -10 * time.Second} {
		got, err := wallstep.Stepped(now, d)
		require.NoError(t, err)
		assert.Zero(t, got.Sub(now), "the same monotonic reading")
		assert.Equal(t, d, got.Round(0).Sub(now.Round(0)), "the wall clock reading moved")
	}
	_, err := wallstep.Stepped(now.Round(0), time.Second)
	assert.Error(t, err, "no monotonic reading")
	_, err = wallstep.Stepped(now, 1500*time.Millisecond)
	assert.Error(t, err, "not whole seconds")
}
