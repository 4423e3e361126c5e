package deadline_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
)

func TestBudgetLogsEveryChangeThatTakesEffect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		b, err := deadline.New(3600*time.Second, deadline.Config{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
		require.NoError(t, err)
		t0 := time.Now()
		b.OnPreStop(t0)
		b.OnPreStop(t0.Add(time.Second))      // ignored: not logged
		b.Tighten(t0.Add(4000 * time.Second)) // later: not logged
		b.Tighten(t0.Add(30 * time.Second))   // logged
		b.OnSIGTERM(t0.Add(30 * time.Second)) // logged: the hook overran the cut grace
		b.OnSIGTERM(t0.Add(31 * time.Second)) // ignored

		type record struct {
			Msg, Event, Anchor string
			Change             uint64
			T0, Kill, Deadline time.Time
			SIGTERM            *time.Time
		}
		var got []record
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var r record
			require.NoError(t, dec.Decode(&r))
			got = append(got, r)
		}
		require.Len(t, got, 3)
		assert.Equal(t, []string{"preStop", "tighten", "SIGTERM"}, []string{got[0].Event, got[1].Event, got[2].Event})
		assert.Equal(t, "deadline: budget changed", got[0].Msg)
		assert.Equal(t, []uint64{1, 2, 3}, []uint64{got[0].Change, got[1].Change, got[2].Change}, "the changes that took effect, numbered")
		assert.Equal(t, "preStop", got[2].Anchor)
		assert.True(t, t0.Equal(got[0].T0))
		assert.True(t, t0.Add(3600*time.Second).Equal(got[0].Kill))
		assert.True(t, t0.Add(30*time.Second).Equal(got[1].Kill))
		assert.True(t, t0.Add(32*time.Second).Equal(got[2].Kill))
		assert.True(t, t0.Add(31*time.Second).Equal(got[2].Deadline))
		assert.Nil(t, got[1].SIGTERM)
		require.NotNil(t, got[2].SIGTERM)
		assert.True(t, t0.Add(30*time.Second).Equal(*got[2].SIGTERM))
	})
}

// lines is a slog.Handler that keeps each record's attributes.
type lines struct {
	mu  sync.Mutex
	got []map[string]any
}

func (h *lines) Enabled(context.Context, slog.Level) bool { return true }
func (h *lines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lines) WithGroup(string) slog.Handler            { return h }
func (h *lines) Handle(_ context.Context, r slog.Record) error {
	m := map[string]any{}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Any(); return true })
	h.mu.Lock()
	h.got = append(h.got, m)
	h.mu.Unlock()
	return nil
}

// Fault: each change's line read the budget again after the change had
// released the lock, so a change made concurrently (SIGTERM in its
// handler, a Tighten from the drain's read of the pod) landed in the line
// of the other: "event=SIGTERM kill=T0+20s", the tightened SIGKILL, where
// SIGTERM had set T0+30s, or a tighten line with the SIGTERM that came
// after it, and the two lines then showed the same state (174 of 20000
// runs of a bare loop; this test failed within its first 62 runs, 3 of 3
// times). Each line now shows the state its change left, read
// under the same lock, and numbers the change, so lines written in the
// other order still tell which came first.
//
//	T0 preStop (grace 30 s); then at once, concurrently:
//	SIGTERM at T0+10 s: SIGKILL T0+30 s (the kubelet's 30 - 10 after SIGTERM), or kept at T0+20 s
//	Tighten(T0+20 s):   SIGKILL T0+20 s whatever came first
func TestBudgetLogLineShowsTheStateItsChangeLeft(t *testing.T) {
	for i := range 5000 {
		h := &lines{}
		b, err := deadline.New(30*time.Second, deadline.Config{Logger: slog.New(h)})
		require.NoError(t, err)
		t0 := time.Now()
		b.OnPreStop(t0)
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; b.OnSIGTERM(t0.Add(10 * time.Second)) })
		wg.Go(func() { <-start; b.Tighten(t0.Add(20 * time.Second)) })
		close(start)
		wg.Wait()

		require.Len(t, h.got, 3)
		changes := h.got[1:]
		kill := func(l map[string]any) time.Duration { return l["kill"].(time.Time).Sub(t0) }
		_, sig0 := changes[0]["sigterm"]
		_, sig1 := changes[1]["sigterm"]
		if kill(changes[0]) == kill(changes[1]) && sig0 == sig1 {
			t.Fatalf("run %d: two changes, two lines with the same state: %v", i, changes)
		}
		slices.SortFunc(changes, func(a, b map[string]any) int { return cmp.Compare(a["change"].(uint64), b["change"].(uint64)) })
		require.Equal(t, []uint64{2, 3}, []uint64{changes[0]["change"].(uint64), changes[1]["change"].(uint64)})
		first, second := changes[0], changes[1]
		if first["event"] == "SIGTERM" {
			assert.Equal(t, 30*time.Second, kill(first), "run %d: SIGTERM first: the kubelet's SIGKILL", i)
		} else {
			_, sigterm := first["sigterm"]
			assert.False(t, sigterm, "run %d: tighten first: no SIGTERM yet", i)
			assert.Equal(t, 20*time.Second, kill(first), "run %d", i)
		}
		assert.Equal(t, 20*time.Second, kill(second), "run %d", i)
		assert.Contains(t, second, "sigterm", "run %d", i)
		if t.Failed() {
			t.Fatalf("run %d: %v", i, changes)
		}
	}
}

// Fault (docs/faults.md row 1021): the line of OnRestart, the one change
// that can move SIGKILL later, showed the new SIGKILL and the budget's own
// grace (the manifest's hour) but neither the run it was computed from nor
// that run's grace: a reader checking a SIGKILL that moved from T0+30 s to
// T0+40 s had nothing in the line to check it against. Each line now shows
// the latest run and its grace once there is one, as it shows SIGTERM.
//
//	T0 preStop (grace 1 h), Tighten to T0+30 s (a deletion's 30 s)
//	T0+10 s the kubelet runs the hook again with 30 s: SIGKILL T0+40 s
//	T0+15 s SIGTERM: 30 - 5 whole seconds: SIGKILL T0+40 s
func TestBudgetLogLineOfARestartNamesTheRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &lines{}
		b, err := deadline.New(time.Hour, deadline.Config{Logger: slog.New(h)})
		require.NoError(t, err)
		t0 := time.Now()
		b.OnPreStop(t0)
		b.Tighten(t0.Add(30 * time.Second))
		time.Sleep(10 * time.Second)
		require.True(t, b.OnRestart(time.Now(), 30*time.Second))
		time.Sleep(5 * time.Second)
		require.True(t, b.OnSIGTERM(time.Now()))

		require.Len(t, h.got, 4)
		for _, l := range h.got[:2] {
			assert.NotContains(t, l, "restart", "%s: no run yet", l["event"])
			assert.NotContains(t, l, "restart_grace", "%s: no run yet", l["event"])
		}
		for _, l := range h.got[2:] {
			require.Contains(t, l, "restart", "%s: the run SIGKILL follows", l["event"])
			assert.Equal(t, 10*time.Second, l["restart"].(time.Time).Sub(t0), l["event"])
			assert.Equal(t, 30*time.Second, l["restart_grace"], l["event"])
			assert.Equal(t, 40*time.Second, l["kill"].(time.Time).Sub(t0), l["event"])
		}
		assert.Equal(t, "restart", h.got[2]["event"])
	})
}
