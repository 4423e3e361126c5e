package bounded

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const slack = 100 * time.Millisecond

func TestACallThatReturnsInTimeGivesItsResult(t *testing.T) {
	v, err := Call(context.Background(), slack, func(context.Context) (int, error) { return 7, errors.New("its own") })
	assert.Equal(t, 7, v)
	assert.EqualError(t, err, "its own")
}

// A function that honours its context returns within the slack after the
// deadline: its own error is reported, not ErrAbandoned.
func TestACooperativeCallReturnsItsOwnErrorAfterTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := Run(ctx, slack, func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(slack / 2) // cleans up
			return ctx.Err()
		})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second+slack/2, time.Since(start))
	})
}

// A function that ignores its context is abandoned exactly slack after the
// deadline; its goroutine finishes later without blocking.
func TestACallThatIgnoresItsContextIsAbandonedAfterTheSlack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		v, err := Call(ctx, slack, func(context.Context) (string, error) {
			time.Sleep(time.Hour)
			return "too late", nil
		})
		require.ErrorIs(t, err, ErrAbandoned)
		assert.Empty(t, v)
		assert.Equal(t, time.Second+slack, time.Since(start))
		time.Sleep(time.Hour) // let the abandoned goroutine end: synctest checks none is left blocked
	})
}

func TestZeroSlackAbandonsAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := Run(ctx, 0, func(context.Context) error { time.Sleep(time.Minute); return nil })
		require.ErrorIs(t, err, ErrAbandoned)
		assert.Equal(t, time.Second, time.Since(start))
		time.Sleep(time.Minute)
	})
}

func TestAPanicIsAnErrorWithItsStack(t *testing.T) {
	err := Run(context.Background(), slack, func(context.Context) error { panic("boom") })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "panic: boom")
	assert.Contains(t, err.Error(), "bounded_test.go", "the stack names where it panicked")
}
