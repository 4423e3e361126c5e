package httpsource

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

// Over a real loopback server that answers slowly and fails some pauses:
// every running sandbox is preserved or accounted for.
func TestPreserverPreservesEveryRunningSandboxOverLoopback(t *testing.T) {
	const n = 30
	f := newFakeServer(n, func(f *fakeServer) {
		f.pauseDelay = 5 * time.Millisecond
		for i := 0; i < n; i += 5 {
			f.failFirst[sandboxID(i)] = 2 // two 500s, then it pauses
		}
	})
	f.add("already-paused", "paused")
	src, err := New(f.start(t), Config{})
	require.NoError(t, err)
	vanishing := sandboxID(7)
	first := true
	list := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		sbs, err := src.List(ctx)
		if first { // deleted by its user after the listing
			f.remove(vanishing)
			first = false
		}
		return sbs, err
	})
	p, err := pause.New(list, pause.Config{Limit: 8})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rep := p.Run(ctx, time.Time{})

	assert.Equal(t, n-1, rep.Counts[pause.Preserved])
	assert.Equal(t, 1, rep.Counts[pause.Vanished])
	assert.Zero(t, rep.Lost())
	assert.Len(t, rep.Entries, n, "the paused one is not listed, the others each once")
	assert.Equal(t, pause.Vanished, entry(t, rep, vanishing).Outcome)
	for i := 0; i < n; i += 5 {
		e := entry(t, rep, sandboxID(i))
		assert.Equal(t, pause.Preserved, e.Outcome, e.ID)
		assert.Equal(t, 3, e.Attempts, "%s: two 500s were retried", e.ID)
	}
	assert.Len(t, f.paused(), n, "n-1 preserved plus the one that was paused already")
}

// A pause the server refuses for good is reported Failed after one attempt;
// the others go on.
func TestPermanentRefusalIsFailedAndNotRetried(t *testing.T) {
	f := newFakeServer(4)
	mux := http.NewServeMux()
	mux.Handle("/", f.handler())
	mux.HandleFunc("POST /sandboxes/sb-ab/pause", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"message":"sandbox is being forked"}`, http.StatusBadRequest)
	})
	src := inProcess(t, mux, Config{})
	p, err := pause.New(src, pause.Config{Limit: 4})
	require.NoError(t, err)
	rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
	assert.Equal(t, 3, rep.Counts[pause.Preserved])
	e := entry(t, rep, "sb-ab")
	assert.Equal(t, pause.Failed, e.Outcome)
	assert.Equal(t, 1, e.Attempts)
	assert.Contains(t, e.Error, "400 Bad Request")
}

// A slow server: pauses take 10 s, the phase ends at 35 s. Three rounds of
// four finish, the fourth is cut at the deadline, the rest never start, and
// the Run ends at the deadline, not when the server finishes.
func TestSlowServerIsCutAtThePhaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(20, func(f *fakeServer) { f.pauseDelay = 10 * time.Second })
		p, err := pause.New(inProcess(t, f.handler(), Config{}), pause.Config{Limit: 4, Order: pause.OrderFIFO})
		require.NoError(t, err)
		start := time.Now()
		rep := p.Run(ctxWithDeadline(t, 35*time.Second), time.Time{})
		assert.Equal(t, 35*time.Second, time.Since(start))
		assert.Equal(t, 12, rep.Counts[pause.Preserved])
		assert.Equal(t, 4, rep.Counts[pause.TimedOut])
		assert.Equal(t, 4, rep.Counts[pause.NotStarted])
		time.Sleep(10 * time.Second) // let the server's own pauses end
	})
}

// The server pauses one sandbox at a time, answering 429 (reject) or
// queueing (block) when busy. With a Preserver limit of 8 instead of 1 every
// sandbox is still preserved, the server is never idle while work is left
// (same makespan, exactly, in virtual time), and the 429s are few: the
// Source learns the server handles one at a time.
func TestOneAtATimeServerIsNoWorseAtHigherConcurrency(t *testing.T) {
	const n, pauseTime = 24, 2500 * time.Millisecond
	for _, mode := range []serial{reject, block} {
		t.Run(fmt.Sprint(map[serial]string{reject: "reject", block: "block"}[mode]), func(t *testing.T) {
			run := func(limit int) (makespan time.Duration, rejected int, rep *pause.Report) {
				synctest.Test(t, func(t *testing.T) {
					f := newFakeServer(n, func(f *fakeServer) { f.pauseDelay, f.serial = pauseTime, mode })
					p, err := pause.New(inProcess(t, f.handler(), Config{}), pause.Config{Limit: limit})
					require.NoError(t, err)
					start := time.Now()
					rep = p.Run(ctxWithDeadline(t, time.Hour), time.Time{})
					makespan = time.Since(start)
					var maxIn int
					rejected, maxIn = f.stats()
					assert.Equal(t, 1, maxIn, "the server never ran two pauses")
					assert.Len(t, f.paused(), n)
				})
				return makespan, rejected, rep
			}
			one, rejected1, rep1 := run(1)
			eight, rejected8, rep8 := run(8)
			t.Logf("makespan limit 1: %v, limit 8: %v; 429s: %d vs %d", one, eight, rejected1, rejected8)
			assert.Equal(t, n, rep1.Counts[pause.Preserved])
			assert.Equal(t, n, rep8.Counts[pause.Preserved])
			assert.Equal(t, time.Duration(n)*pauseTime, one, "sequential")
			assert.LessOrEqual(t, eight, one, "limit 8 must not be slower than limit 1")
			assert.Zero(t, rejected1)
			if mode == reject {
				// 7 while discovering the limit, then one probe per probeAfter pauses.
				assert.LessOrEqual(t, rejected8, 7+n/probeAfter+1)
			}
		})
	}
}

func entry(t *testing.T, rep *pause.Report, id string) pause.Entry {
	t.Helper()
	for _, e := range rep.Entries {
		if e.ID == id {
			return e
		}
	}
	t.Fatalf("no entry for %s", id)
	return pause.Entry{}
}

// The same one-at-a-time servers over real loopback HTTP, at limit 8: every
// sandbox preserved, and the Source learns the server's limit from its
// 429s instead of hammering it (the benchmark compares the makespans).
func TestOneAtATimeServerOverLoopback(t *testing.T) {
	const n = 24
	for name, mode := range map[string]serial{"reject": reject, "block": block} {
		t.Run(name, func(t *testing.T) {
			f := newFakeServer(n, func(f *fakeServer) { f.pauseDelay, f.serial = 5*time.Millisecond, mode })
			src, err := New(f.start(t), Config{})
			require.NoError(t, err)
			p, err := pause.New(src, pause.Config{Limit: 8})
			require.NoError(t, err)
			rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
			assert.Equal(t, n, rep.Counts[pause.Preserved])
			assert.Len(t, f.paused(), n)
			rejected, _ := f.stats()
			t.Logf("429s: %d, source limit at the end: %d", rejected, src.Limit())
			if mode == reject {
				assert.Less(t, rejected, n, "fewer 429s than sandboxes: the limit was learned")
				assert.LessOrEqual(t, src.Limit(), 3)
			}
		})
	}
}

// Fault: the server's list call fails: an HTML error page, a 500 every
// time, or a hang. Twenty sandboxes run and none is listed; the Report
// must not read as success: it is Unknown, and its error carries the last
// listing error.
func TestFailedListingIsUnknownWithTheLastError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"html", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html><body>Bad Gateway</body></html>")
		}, "list"},
		{"500", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "boom", http.StatusInternalServerError)
		}, "500"},
		{"hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, "deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeServer(20)
				mux := http.NewServeMux()
				mux.Handle("/", f.handler())
				mux.Handle("GET /sandboxes", tc.handler)
				p, err := pause.New(inProcess(t, mux, Config{ListTimeout: 2 * time.Second}), pause.Config{})
				require.NoError(t, err)
				rep := p.Run(ctxWithDeadline(t, 10*time.Second), time.Time{})
				assert.Zero(t, rep.Lost())
				assert.True(t, rep.Unknown)
				require.Error(t, rep.Err())
				assert.Contains(t, rep.Err().Error(), "unknown")
				assert.Contains(t, rep.Err().Error(), tc.want)
				assert.Empty(t, f.paused())
			})
		})
	}
}

// Fault: one element of a listing has no ID (null, or ""), among running
// sandboxes that have theirs. The whole listing failed, so the Run knew no
// sandbox at all and preserved none of the others. Now the others are
// listed and preserved, and the one without an ID, which no pause request
// can name, is in the Report as failed, once however many passes list it;
// a sandbox that is not running needs no ID, as it needs no pause.
func TestARunningSandboxWithoutAnIDCostsOnlyItself(t *testing.T) {
	f := newFakeServer(3)
	mux := http.NewServeMux()
	mux.Handle("/", f.handler())
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		state := func(id string) string { return strconv.Quote(f.state(id)) }
		fmt.Fprintf(w, `[{"id":"sb-aa","state":%s},{"id":null,"state":"running","memoryMB":512},`+
			`{"id":"sb-ab","state":%s},{"id":"","state":"creating"},{"id":"sb-ac","state":%s}]`,
			state("sb-aa"), state("sb-ab"), state("sb-ac"))
	})
	var logs bytes.Buffer
	p, err := pause.New(inProcess(t, mux, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}), pause.Config{})
	require.NoError(t, err)
	rep := p.Run(ctxWithDeadline(t, 10*time.Second), time.Time{})

	assert.Equal(t, 1, strings.Count(logs.String(), "without an ID"), "said once, with what the server sent: %s", logs.String())
	assert.Contains(t, logs.String(), `element 1 of page 1: field \"id\" must be a non-empty string or number (fields: id, memoryMB, state)`)
	assert.Greater(t, rep.Passes, 1, "it is listed again after the others are paused")
	assert.False(t, rep.Unknown)
	assert.Equal(t, 3, rep.Counts[pause.Preserved], "the sandboxes with an ID are preserved")
	assert.Equal(t, 1, rep.Counts[pause.Failed])
	require.Len(t, rep.Entries, 4, "the creating one without an ID needs no pause")
	for _, e := range rep.Entries {
		if e.Outcome == pause.Failed {
			assert.Empty(t, e.ID)
			assert.Zero(t, e.Attempts, "no request can name it")
			assert.Contains(t, e.Error, "empty ID")
		}
	}
	require.Error(t, rep.Err())
	assert.Contains(t, rep.Err().Error(), "1 of 4 sandboxes not preserved")
	assert.Len(t, f.paused(), 3)
}
