package pause_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/pause"
)

// An outcome is lost when its sandbox would die with the node's SIGKILL:
// the outcomes Report.Lost counts, and no other.
func TestOutcomeLostIsWhatReportLostCounts(t *testing.T) {
	all := []pause.Outcome{pause.Preserved, pause.Failed, pause.TimedOut, pause.NotStarted, pause.Vanished}
	for _, o := range all {
		rep := &pause.Report{Counts: map[pause.Outcome]int{o: 1}}
		assert.Equal(t, rep.Lost() == 1, o.Lost(), "%s", o)
	}
	assert.False(t, pause.Preserved.Lost())
	assert.False(t, pause.Vanished.Lost())
	assert.True(t, pause.TimedOut.Lost())
}
