package lastreport

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/pause"
)

// A drain of 100 sandboxes of 100 ms, one at a time: the node's count changes every
// 100 ms for 10 s, and the account is rewritten for it at most once every Every (row
// 1510): 10 s of changes, a write and an fsync each, make at most 11 rewrites, not 100,
// and at least 9 (it follows them). Each phase's end is written at once besides (the
// gate's and the preserve phase's), and the start.
func TestProgressRewritesAtMostOnceASecondAsSandboxesSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "last-shutdown.json")
		budget, err := deadline.New(60*time.Second, deadline.Config{})
		require.NoError(t, err)
		node := draintest.NewNode()
		sbs := node.AddN("sb", 100, 100*time.Millisecond)
		settled := func() map[string]int {
			n := 0
			for _, s := range sbs {
				if s.Preserved() {
					n++
				}
			}
			return map[string]int{"paused": n}
		}
		cfg := drain.Config{Budget: budget, Sandboxes: node, Pause: pause.Config{Limit: 1}}
		p := Follow(&cfg, path, 0o600, slog.New(slog.DiscardHandler), settled)
		var mu sync.Mutex
		var writes []Unfinished
		p.write = func(path string, data []byte, perm os.FileMode) error {
			var acc struct{ Unfinished Unfinished }
			require.NoError(t, json.Unmarshal(data, &acc))
			mu.Lock()
			writes = append(writes, acc.Unfinished)
			mu.Unlock()
			return os.WriteFile(path, data, perm)
		}
		d, err := drain.New(cfg)
		require.NoError(t, err)
		p.Start(d)
		rep := d.Shutdown(context.Background())
		synctest.Wait() // the preserve phase's end written; Stop would skip it, the final Report next
		p.Stop()
		require.Equal(t, 100, rep.Preserve.Counts[pause.Preserved])

		var byCounts int
		for i, w := range writes {
			if i > 0 && w.Phase == writes[i-1].Phase && w.Phase == drain.PhasePreserve {
				byCounts++
				assert.GreaterOrEqual(t, w.At.Sub(writes[i-1].At), Every, "rewrite %d: %+v", i, w)
			}
		}
		assert.LessOrEqual(t, byCounts, 11, "%d rewrites for the counts", byCounts)
		assert.GreaterOrEqual(t, byCounts, 9, "%d rewrites for the counts", byCounts)
		last := writes[len(writes)-1]
		assert.Empty(t, last.Phase, "the preserve phase's end, the last: %+v", last)
		assert.Equal(t, 100, last.Node["paused"])
	})
}

// A drain begun by the kubelet's preStop call, which the drain does not tell until
// SIGTERM: within Every of the call the file is this drain's account, the preStop wait
// ("drain") running, where an earlier drain's Report was; Stop before any drain writes
// nothing.
func TestProgressWritesTheAccountAtThePreStopCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "last-shutdown.json")
		require.NoError(t, os.WriteFile(path, []byte(`{"start": "2026-12-05T10:00:00Z"}`), 0o600))
		budget, err := deadline.New(60*time.Second, deadline.Config{})
		require.NoError(t, err)
		cfg := drain.Config{Budget: budget, Sandboxes: draintest.NewNode()}
		p := Follow(&cfg, path, 0o600, slog.New(slog.DiscardHandler), nil)
		d, err := drain.New(cfg)
		require.NoError(t, err)
		p.Start(d)
		time.Sleep(10 * Every)
		synctest.Wait()
		assert.True(t, lastreportFinished(t, path), "nothing written before the drain")

		called := time.Now()
		budget.OnPreStop(called)
		time.Sleep(Every)
		synctest.Wait()
		p.Stop()
		var acc struct {
			Start      time.Time
			Unfinished *Unfinished
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &acc))
		require.NotNil(t, acc.Unfinished, "%s", data)
		assert.Equal(t, drain.PhaseDrain, acc.Unfinished.Phase)
		assert.False(t, acc.Start.Before(called), "this drain's start: %s", data)
	})
}

// lastreportFinished reports whether path holds a file with no "unfinished" member.
func lastreportFinished(t *testing.T, path string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var acc struct{ Unfinished *Unfinished }
	require.NoError(t, json.Unmarshal(data, &acc))
	return acc.Unfinished == nil
}
