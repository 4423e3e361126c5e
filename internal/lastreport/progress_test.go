//go:build linux

package lastreport

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
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

// Fault (row 1611): the final Report that could not be written took this drain's own
// account with it, by Write's rule for an earlier shutdown's Report, which this one is
// not: on a full file system the account was removed for the Report's space and, the
// Report larger, nothing was left; on a file system remounted read-only mid-drain (ext4's
// errors=remount-ro) the error called the account "an earlier shutdown's Report, not this
// one's". Finish keeps the account as last written, unfinished, this drain's:
//
//	a 256 KiB tmpfs: the account written at SIGTERM, then the file system full
//	  or remounted read-only
//	the final Report (12 KiB, larger than the account's page) cannot be written:
//	  the file is this drain's account, unfinished, the error the write's
//	(a Report that fits in the account's space is written there:
//	TestProgressFinishOnAFullFileSystemTakesTheAccountsSpace)
func TestProgressFinishThatCannotWriteTheReportLeavesThisDrainsAccount(t *testing.T) {
	for _, how := range []string{"full", "read-only"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := lastreporttest.Tmpfs(t, "256k")
				path := filepath.Join(dir, "last-shutdown.json")
				require.NoError(t, os.WriteFile(path, []byte(`{"start": "2026-12-05T10:00:00Z"}`), 0o600))
				var log bytes.Buffer
				p, rep := drainFollowed(t, path, slog.New(slog.NewTextHandler(&log, nil)))
				account, err := os.ReadFile(path)
				require.NoError(t, err)
				require.False(t, lastreporttest.Finished(path), "this drain's account: %s", account)
				if how == "full" {
					lastreporttest.FillUp(t, filepath.Join(dir, "filler"))
				} else {
					require.NoError(t, syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""))
				}

				final := append(bytes.Repeat([]byte(" "), 12<<10), `{"start": "`+rep.Start.Format(time.RFC3339Nano)+`"}`...)
				err = p.Finish(final)
				require.Error(t, err)
				assert.NotContains(t, err.Error(), "an earlier shutdown's")
				got, rerr := os.ReadFile(path)
				require.NoError(t, rerr, "this drain's account, removed")
				assert.Equal(t, string(account), string(got), "this drain's account as last written")
				assert.Contains(t, log.String(), `level=ERROR msg="the Report could not be written: the file holds this drain's account as last written, unfinished"`)
			})
		})
	}
}

// drainFollowed drains an empty node under a Progress at path, as a server does, and
// returns the Progress, stopped, and the Report, not written; in a synctest bubble.
func drainFollowed(t *testing.T, path string, logger *slog.Logger) (*Progress, *drain.Report) {
	t.Helper()
	budget, err := deadline.New(60*time.Second, deadline.Config{})
	require.NoError(t, err)
	cfg := drain.Config{Budget: budget, Sandboxes: draintest.NewNode()}
	p := Follow(&cfg, path, 0o600, logger, nil)
	d, err := drain.New(cfg)
	require.NoError(t, err)
	p.Start(d)
	rep := d.Shutdown(context.Background())
	synctest.Wait() // every phase's end written
	p.Stop()
	return p, rep
}

// On a full file system a final Report that fits in the space of this drain's account is
// written there, said at WARN.
func TestProgressFinishOnAFullFileSystemTakesTheAccountsSpace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := lastreporttest.Tmpfs(t, "256k")
		path := filepath.Join(dir, "last-shutdown.json")
		var log bytes.Buffer
		p, rep := drainFollowed(t, path, slog.New(slog.NewTextHandler(&log, nil)))
		lastreporttest.FillUp(t, filepath.Join(dir, "filler"))
		final := []byte(`{"start": "` + rep.Start.Format(time.RFC3339Nano) + `"}`)
		require.NoError(t, p.Finish(final))
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, string(final), string(got))
		assert.Contains(t, log.String(), `level=WARN msg="the Report written in the space of this drain's account, removed first`)
	})
}

// Fault (row 1612): the account written at the drain's start on a full file system, in
// the space of an earlier shutdown's Report, was said to be the Report ("the Report
// written in the space of an earlier shutdown's"), at the drain's start, before any
// Report: a log that said the Report was written, then that it could not be. It says
// the account now.
func TestProgressSaysItsAccountOnAFullFileSystemIsNoReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := lastreporttest.Tmpfs(t, "256k")
		path := filepath.Join(dir, "last-shutdown.json")
		require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte(" "), 8<<10), 0o600))
		lastreporttest.FillUp(t, filepath.Join(dir, "filler"))
		var log bytes.Buffer
		drainFollowed(t, path, slog.New(slog.NewTextHandler(&log, nil)))
		assert.False(t, lastreporttest.Finished(path), "this drain's account, in the earlier Report's space")
		assert.Contains(t, log.String(), `level=WARN msg="this drain's account written in the space of an earlier shutdown's Report, removed first: the file system is full"`)
		assert.NotContains(t, log.String(), "the Report written", "no Report was")
	})
}
