package drain

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/pause"
)

// The seed at full scale, in virtual time: grace 3600 s, 200 running
// sandboxes whose preserve takes 2 s and whose 24 h timeouts never end
// during the drain, a device daemon that takes 1 s to stop. kubeletsim
// terminates the in-process server exactly as the kubelet would.
//
//	drainkit: T0 preStop ... 3484 s drain deadline (3600 - 30 margin - 60 daemon - ceil(200/16) x 2 s)
//	          the hook answers 300 ms early: SIGTERM at 3483.7 s (SIGKILL at 3600.7 s, the kubelet truncating)
//	          -> 26 s of preserving, 16 at a time -> daemon stopped (1 s) -> exit 90 s before SIGKILL
//	seed:     T0 preStop waits for 0 running ... 3600 s hook abandoned -> SIGTERM, 2 s floor
//	          one 2 s pause at a time -> SIGKILL at 3602 s
func TestFullScaleSeedScenario(t *testing.T) {
	t.Run("drainkit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			res := fullScale(t, false)
			assert.Equal(t, 200, res.preserved, "every sandbox preserved before SIGKILL")
			assert.True(t, res.daemonStopped, "the device daemon stopped cleanly")
			assert.False(t, res.tl.Killed)
			assert.GreaterOrEqual(t, res.tl.Headroom(), 60*time.Second, "timeline:\n%s", res.tl)
			require.NotNil(t, res.rep)
			assert.GreaterOrEqual(t, res.rep.Headroom, 60*time.Second)
			assert.Equal(t, 200, res.rep.Preserve.Counts[pause.Preserved])
			t.Logf("drainkit: %d/200 preserved, headroom %v\n%s", res.preserved, res.tl.Headroom(), res.tl)
		})
	})
	t.Run("seed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			res := fullScale(t, true)
			assert.LessOrEqual(t, res.preserved, 3, "at most a handful preserved")
			assert.False(t, res.daemonStopped, "the daemon was SIGKILLed with its devices live")
			assert.True(t, res.tl.HookKept)
			assert.True(t, res.tl.Killed)
			t.Logf("seed: %d/200 preserved\n%s", res.preserved, res.tl)
		})
	})
}

type fullScaleResult struct {
	preserved     int
	daemonStopped bool
	tl            *kubeletsim.Timeline
	rep           *Report
}

// fullNode is 200 in-process sandboxes that count only the preserves that
// finished before SIGKILL: a killed process persists nothing more.
type fullNode struct {
	killed <-chan struct{}
	mu     sync.Mutex
	run    map[string]bool
	order  []string
	done   int
}

type fullSandbox struct {
	id   string
	node *fullNode
}

func (s fullSandbox) ID() string                       { return s.id }
func (s fullSandbox) EstimatedPreserve() time.Duration { return 2 * time.Second }

func (s fullSandbox) Preserve(ctx context.Context) error {
	end := time.Now().Add(2 * time.Second)
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		// The last pause ends at the very instant the preserve phase does:
		// in virtual time both fire together, so say which one wins.
		if time.Now().Before(end) {
			return ctx.Err()
		}
	case <-s.node.killed:
		return context.Canceled
	}
	s.node.mu.Lock()
	defer s.node.mu.Unlock()
	select {
	case <-s.node.killed:
		return context.Canceled
	default:
	}
	delete(s.node.run, s.id)
	s.node.done++
	return nil
}

func (n *fullNode) List(context.Context) ([]pause.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []pause.Sandbox
	for _, id := range n.order {
		if n.run[id] {
			out = append(out, fullSandbox{id: id, node: n})
		}
	}
	return out, nil
}

func fullScale(t *testing.T, seed bool) fullScaleResult {
	const grace = 3600 * time.Second
	proc := kubeletsim.NewInProcess()
	node := &fullNode{killed: proc.Killed(), run: map[string]bool{}}
	for i := range 200 {
		id := "sb-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		node.run[id] = true
		node.order = append(node.order, id)
	}
	var daemonStopped bool
	var dmu sync.Mutex
	stopDaemon := func(ctx context.Context) error {
		select {
		case <-time.After(time.Second): // STOP_DEV, DEL_DEV, exit
		case <-proc.Killed():
			return context.Canceled
		}
		dmu.Lock()
		daemonStopped = true
		dmu.Unlock()
		return nil
	}

	var res fullScaleResult
	var hook kubeletsim.Hook
	if seed {
		hook = kubeletsim.HookFunc(func(ctx context.Context) error { // the seed's preStop loop
			for {
				sbs, _ := node.List(ctx)
				if len(sbs) == 0 {
					return nil
				}
				select {
				case <-time.After(3 * time.Second):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		})
		go func() { // the seed's SIGTERM handler: one pause at a time, then the daemon
			defer proc.Exit()
			<-proc.Signals()
			sbs, _ := node.List(context.Background())
			for _, s := range sbs {
				if s.Preserve(context.Background()) != nil {
					return
				}
			}
			_ = stopDaemon(context.Background())
		}()
	} else {
		b, err := deadline.New(grace, deadline.Config{Margin: 30 * time.Second})
		require.NoError(t, err)
		d, err := New(Config{
			Budget:    b,
			Sandboxes: node,
			Pause:     pause.Config{Limit: 16, Estimator: deadline.NewEstimator(2 * time.Second)},
			Steps:     []Step{step("ublk", 60*time.Second, stopDaemon)},
		})
		require.NoError(t, err)
		hook = kubeletsim.HandlerHook{Handler: d.PreStop(), Path: "/drain"}
		go func() {
			defer proc.Exit()
			res.rep = d.ServeSignals(context.Background(), proc.Signals())
		}()
	}
	tl, err := kubeletsim.Terminate(context.Background(), proc, hook, grace)
	require.NoError(t, err)
	synctest.Wait() // a killed in-process server stops at once
	node.mu.Lock()
	res.preserved = node.done
	node.mu.Unlock()
	dmu.Lock()
	res.daemonStopped = daemonStopped
	dmu.Unlock()
	res.tl = tl
	return res
}
