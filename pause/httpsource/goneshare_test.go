package httpsource

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/pause"
)

// Fault: row 1763's check of a gone answer (a 404 for a sandbox the listing
// still shows running: a pause path the server does not have) made a
// listing of every page per gone answer, and took a listing that failed
// for no answer to give: the gone answer stood. With a wrong pause path,
// 200 sandboxes behind AgentENV's double and a proxy limiting listings to
// 10 a second (429, Retry-After: 1), the checks were refused and the
// sandboxes vanished: 199 of 200, "none lost" in the Report while SIGKILL
// would take them all. A sandbox's first gone answer now lists nothing (the
// listing that gave it showed it running), the later ones share a listing
// made since their answer before, one at a time, and a listing that fails
// transiently leaves the answer undecided, retried. In virtual time, pages
// of 100 that take 50 ms each, a Run of 20 s:
//
//	0 s     the pass lists 200 (2 pages); every pause answers 404 page not found
//	20 s    the phase's end: 200 lost, each failed naming the path; no
//	        listing refused, one check at a time, far fewer than the 404s
func TestGoneAnswersToAWrongPausePathShareTheirListings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := fakeagentenv.New(fakeagentenv.Config{})
		require.NoError(t, err)
		for range 200 {
			_, err := srv.Create(1024)
			require.NoError(t, err)
		}
		api := srv.Handler()
		limit := newListingLimit(10)
		var listings, gone, inList, maxInList atomic.Int64
		var mu sync.Mutex
		proxy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				gone.Add(1) // the pause path is not the server's: 404
				api.ServeHTTP(w, r)
				return
			}
			if !limit.take() {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "rate limited", http.StatusTooManyRequests)
				return
			}
			if !r.URL.Query().Has("nextToken") {
				listings.Add(1)
				mu.Lock()
				maxInList.Store(max(maxInList.Load(), inList.Add(1)))
				mu.Unlock()
				defer inList.Add(-1)
			}
			time.Sleep(50 * time.Millisecond) // a page of a busy server
			api.ServeHTTP(w, r)
		})
		c := AgentENV()
		c.PausePath = "/sandbox/{id}/pause"
		p, err := pause.New(inProcess(t, proxy, c), pause.Config{})
		require.NoError(t, err)

		rep := p.Run(ctxWithDeadline(t, 20*time.Second), time.Time{})
		limit.stop()
		time.Sleep(time.Second) // the handlers the Run's end cut finish

		assert.Zero(t, rep.Counts[pause.Vanished], "%v", rep.Counts)
		assert.Equal(t, 200, rep.Lost(), "%v", rep.Counts)
		for _, e := range rep.Entries {
			if e.Attempts > 0 && !assert.Contains(t, e.Error, `Config.PausePath "/sandbox/{id}/pause"`, "%s", e) {
				break
			}
		}
		assert.Zero(t, limit.refused.Load(), "no listing refused by the server's rate limit")
		assert.LessOrEqual(t, maxInList.Load(), int64(2), "one check at a time, beside the pass's own listing")
		t.Logf("%v; %d listings, %d 404s", rep.Counts, listings.Load(), gone.Load())
		assert.Less(t, 2*listings.Load(), gone.Load(), "a listing settles the gone answers that share it: %d listings, %d 404s", listings.Load(), gone.Load())
	})
}

// A listingLimit is a rate limit of n listing pages a second (a token
// bucket of n, one token back every 1/n s), as a proxy in front of a server
// would keep.
type listingLimit struct {
	tokens, refused atomic.Int64
	done            chan struct{}
}

func newListingLimit(n int64) *listingLimit {
	l := &listingLimit{done: make(chan struct{})}
	l.tokens.Store(n)
	go func() {
		tick := time.NewTicker(time.Second / time.Duration(n))
		defer tick.Stop()
		for {
			select {
			case <-l.done:
				return
			case <-tick.C:
				if l.tokens.Load() < n {
					l.tokens.Add(1)
				}
			}
		}
	}()
	return l
}

func (l *listingLimit) take() bool {
	if l.tokens.Add(-1) < 0 {
		l.tokens.Add(1)
		l.refused.Add(1)
		return false
	}
	return true
}

func (l *listingLimit) stop() { close(l.done) }

// With gone answers settled so, a sandbox's first gone answer lists nothing,
// unless no retry may follow: a sandbox deleted by its user as the phase
// ends, its 404 coming past the phase deadline, is settled by a listing
// then, gone, not failed for a retry that is never sent. In virtual time:
//
//	0 s    the pass lists a running; its user deletes it; its pause is slow
//	10 s   the phase deadline
//	12 s   404: listed no more, vanished
func TestAGoneAnswerPastThePhaseDeadlineIsSettledByAListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var listings atomic.Int64
		mux := http.NewServeMux()
		mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
			if listings.Add(1) == 1 {
				fmt.Fprint(w, `[{"id":"a","state":"running"}]`)
				return
			}
			fmt.Fprint(w, `[]`)
		})
		mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(12 * time.Second)
			http.Error(w, `{"message":"sandbox a not found"}`, http.StatusNotFound)
		})
		p, err := pause.New(inProcess(t, mux, Config{}), pause.Config{})
		require.NoError(t, err)
		start := time.Now()

		rep := p.Run(ctxWithDeadline(t, 10*time.Second), start.Add(20*time.Second))

		e := entry(t, rep, "a")
		assert.Equal(t, pause.Vanished, e.Outcome, e.Error)
		assert.Equal(t, int64(2), listings.Load(), "the pass's, and the one that settled the 404")
	})
}
