package main

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The same, in stops alone: the second checkpoint of a sandbox, back from its Preserve
// with "already preserved", asks whether the abandoned one saved it; it is answered once
// that one has recorded how it ended, not before, and what is recorded when its context
// ends first.
func TestPreservedByOthersWaitsForTheAbandonedCheckpointsRecord(t *testing.T) {
	for _, tc := range []struct {
		name        string
		firstFailed bool
		want        bool
	}{
		{"the abandoned one saved it", false, true},
		{"the abandoned one failed", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var s stops
				s.checkpoint("sb")
				_, joined := s.checkpoint("sb")
				require.True(t, joined)
				answer := make(chan bool, 1)
				go func() { answer <- s.preservedByOthers(t.Context(), "sb") }()
				synctest.Wait()
				select {
				case got := <-answer:
					t.Fatalf("answered %v before the abandoned checkpoint recorded how it ended", got)
				default:
				}
				s.checkpointed("sb", tc.firstFailed)
				synctest.Wait()
				assert.Equal(t, tc.want, <-answer)
				s.checkpointed("sb", true)
				assert.Empty(t, s.inFlight())
			})
		})
	}
}

func TestPreservedByOthersGivesUpAtItsContextsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s stops
		s.checkpoint("sb")
		s.checkpoint("sb")
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		assert.False(t, s.preservedByOthers(ctx, "sb"), "the abandoned checkpoint never ended")
		assert.Equal(t, time.Second, time.Since(start))
		assert.Equal(t, 2, s.inFlightOf("sb"))
	})
}

// Two checkpoints back from their Preserve, both joined to a third still in flight, wait
// for that one alone, not for each other.
func TestPreservedByOthersDoesNotWaitForAnotherWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s stops
		s.checkpoint("sb")
		s.checkpoint("sb")
		s.checkpoint("sb")
		answers := make(chan bool, 2)
		for range 2 {
			go func() { answers <- s.preservedByOthers(t.Context(), "sb") }()
		}
		synctest.Wait()
		assert.Empty(t, answers, "answered before the abandoned checkpoint ended")
		s.checkpointed("sb", false)
		synctest.Wait()
		assert.True(t, <-answers)
		assert.True(t, <-answers)
	})
}
