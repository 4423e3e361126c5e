package fakesandbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestScriptedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sb := &fakesandbox.Sandbox{Name: "x", Latency: time.Second, Faults: []fakesandbox.Fault{
			fakesandbox.Transient, fakesandbox.Permanent, fakesandbox.Plain}}
		ctx := t.Context()
		start := time.Now()
		assert.ErrorIs(t, sb.Preserve(ctx), fakesandbox.ErrTransient)
		err := sb.Preserve(ctx)
		var perm *backoff.PermanentError
		assert.ErrorAs(t, err, &perm)
		assert.ErrorIs(t, err, fakesandbox.ErrPermanent)
		err = sb.Preserve(ctx)
		assert.ErrorIs(t, err, fakesandbox.ErrPermanent)
		assert.False(t, errors.As(err, &perm))
		assert.False(t, sb.Preserved())
		require.NoError(t, sb.Preserve(ctx))
		assert.True(t, sb.Preserved())
		assert.Equal(t, 4, sb.Attempts())
		assert.Equal(t, 4*time.Second, time.Since(start))
		assert.Len(t, sb.Starts(), 4)
	})
}

func TestPreserveHonoursContextButHangDoesNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		slow := &fakesandbox.Sandbox{Name: "slow", Latency: time.Minute}
		assert.ErrorIs(t, slow.Preserve(ctx), context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))

		hang := &fakesandbox.Sandbox{Name: "hang", HangFor: time.Hour, Faults: []fakesandbox.Fault{fakesandbox.Hang}}
		assert.ErrorIs(t, hang.Preserve(ctx), fakesandbox.ErrHung)
		assert.Equal(t, time.Hour+time.Second, time.Since(start))
	})
}

func TestPanicAndVanish(t *testing.T) {
	node := fakesandbox.NewNode()
	sbs := node.Add(&fakesandbox.Sandbox{Name: "p", Faults: []fakesandbox.Fault{fakesandbox.Panic}},
		&fakesandbox.Sandbox{Name: "v", Faults: []fakesandbox.Fault{fakesandbox.Vanish}})
	assert.PanicsWithValue(t, "fakesandbox: injected panic", func() { _ = sbs[0].Preserve(t.Context()) })
	assert.ErrorIs(t, sbs[1].Preserve(t.Context()), pause.ErrGone)
	list, err := node.List(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1, "the vanished one is no longer listed")
	assert.Equal(t, "p", list[0].ID())
}

func TestNodeListsWhatNeedsPreservingAndCountsConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		sbs := node.AddN("sb", 3, time.Second)
		var hooks []int
		node.OnList = func(n int) { hooks = append(hooks, n) }
		for _, sb := range sbs[:2] {
			go func() { _ = sb.Preserve(t.Context()) }()
		}
		synctest.Wait()
		assert.Equal(t, 2, node.InFlight())
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 0, node.InFlight())
		assert.Equal(t, 2, node.MaxInFlight())
		node.Remove("sb-2")
		list, err := node.List(t.Context())
		require.NoError(t, err)
		assert.Empty(t, list)
		assert.Equal(t, []int{1}, hooks)
		assert.Len(t, node.Sandboxes(), 3)
	})
}

func TestZeroNodeIsReady(t *testing.T) {
	var node fakesandbox.Node
	node.AddN("sb", 2, 0)
	node.Remove("sb-0")
	list, err := node.List(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "sb-1", list[0].ID())
}

// A fake node through a Preserver: three sandboxes, one failing once.
func Example() {
	node := fakesandbox.NewNode()
	node.AddN("sb", 2, 10*time.Millisecond)
	node.Add(&fakesandbox.Sandbox{Name: "flaky", Latency: 10 * time.Millisecond,
		Faults: []fakesandbox.Fault{fakesandbox.Transient}})
	p, err := pause.New(node, pause.WithBackOff(func() backoff.BackOff {
		return backoff.NewConstantBackOff(10 * time.Millisecond)
	}))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep := p.Run(ctx, time.Time{})
	for _, e := range rep.Entries {
		fmt.Println(e.ID, e.Outcome, e.Attempts)
	}
	// Output:
	// sb-0 preserved 1
	// sb-1 preserved 1
	// flaky preserved 2
}
