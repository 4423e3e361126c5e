package httpsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

// A loopWire is a real loopback server for a test in a synctest bubble: the
// server is started outside the bubble (its goroutines read the network,
// which no bubble can wait on), and the Source's client, inside it, opens
// a connection per request (an idle keep-alive connection's reader would
// keep the bubble's clock from moving) and records when, in the bubble's
// time, each request was sent.
type loopWire struct {
	url  string
	mu   sync.Mutex
	sent []sentRequest
}

type sentRequest struct {
	method, path string
	at           time.Time
}

// newLoopWire serves h on loopback until the test ends. Call it outside the
// bubble.
func newLoopWire(t *testing.T, h http.Handler) *loopWire {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &loopWire{url: srv.URL}
}

// source returns a Source over the wire, configured by c. Call it inside
// the bubble.
func (w *loopWire) source(t *testing.T, c Config) *Source {
	c.Client = &http.Client{Transport: w}
	s, err := New(w.url, c)
	require.NoError(t, err)
	return s
}

var bubbleTransport = &http.Transport{DisableKeepAlives: true}

func (w *loopWire) RoundTrip(r *http.Request) (*http.Response, error) {
	w.mu.Lock()
	w.sent = append(w.sent, sentRequest{r.Method, r.URL.Path, time.Now()})
	w.mu.Unlock()
	return bubbleTransport.RoundTrip(r)
}

// times returns when the requests of method to path were sent.
func (w *loopWire) times(method, path string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var at []time.Time
	for _, s := range w.sent {
		if s.method == method && s.path == path {
			at = append(at, s.at)
		}
	}
	return at
}

// overloadedList answers the first n listings 429 with the Retry-After
// retryAfter, and later ones with one running sandbox, "a", whose pause
// answers 204 and which is listed paused after it.
func overloadedList(n int, retryAfter string) http.Handler {
	var listings atomic.Int64
	var paused atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		if listings.Add(1) <= int64(n) {
			w.Header().Set("Retry-After", retryAfter)
			http.Error(w, `{"message":"rate limited"}`, http.StatusTooManyRequests)
			return
		}
		state := "running"
		if paused.Load() {
			state = "paused"
		}
		fmt.Fprintf(w, `[{"id": "a", "state": %q}]`, state)
	})
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		paused.Store(true)
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// Fault: a listing the server answered 429 with Retry-After was listed
// again when the Preserver's backoff said, whatever the server asked:
// sooner (the default policy's first wait, 0.1 to 0.3 s, against a
// Retry-After of 3 s: the server's capacity spent on listings it had
// said it would refuse) or later (a policy's 20 s against the server's
// 1 s: the phase's time spent waiting). The listing is now made again at
// the time the server named.
func TestListingAnsweredWithRetryAfterIsListedAgainWhenTheServerAsked(t *testing.T) {
	for _, c := range []struct {
		name       string
		retryAfter time.Duration
		backOff    func() backoff.BackOff // nil: the default
	}{
		{"sooner than the backoff", 3 * time.Second, nil},
		{"later than the backoff", time.Second, constantBackOff(20 * time.Second)},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newLoopWire(t, overloadedList(1, fmt.Sprint(int(c.retryAfter.Seconds()))))
			synctest.Test(t, func(t *testing.T) {
				p, err := pause.New(w.source(t, Config{}), pause.Config{BackOff: c.backOff})
				require.NoError(t, err)
				rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
				assert.Equal(t, 1, rep.Counts[pause.Preserved], "%v", rep.Err())

				lists := w.times(http.MethodGet, "/sandboxes")
				require.GreaterOrEqual(t, len(lists), 2)
				assert.Equal(t, c.retryAfter, lists[1].Sub(lists[0]), "listed again when the server asked")
			})
		})
	}
}

// A Retry-After that ends past the phase deadline is not waited for, and
// the server is not listed again before it: the Run ends at once, the
// Report unknown, its listing error saying why no listing followed, where
// the backoff listed it again and again until the phase deadline.
func TestListingRetryAfterPastThePhaseDeadlineIsNotWaitedFor(t *testing.T) {
	w := newLoopWire(t, overloadedList(1000, "120"))
	synctest.Test(t, func(t *testing.T) {
		p, err := pause.New(w.source(t, Config{}), pause.Config{})
		require.NoError(t, err)
		start := time.Now()
		rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
		assert.Zero(t, time.Since(start), "no wait for a listing the server refuses until past the phase")
		assert.Len(t, w.times(http.MethodGet, "/sandboxes"), 1)
		assert.True(t, rep.Unknown)
		assert.Contains(t, rep.ListErr, "429 Too Many Requests (retry after 2m0s)")
		assert.Contains(t, rep.ListErr, "not listed again: the answer asks for no listing before")
		assert.Contains(t, rep.ListErr, "past the phase deadline")
	})
}

// A later page answered 429 with Retry-After: the Preserver preserves the
// pages before it and lists again at the time the server named, where it
// listed again as soon as their pass ended.
func TestPageAnsweredWithRetryAfterIsListedAgainWhenTheServerAsked(t *testing.T) {
	var page2 atomic.Int64
	var paused sync.Map
	state := func(id string) string {
		if _, ok := paused.Load(id); ok {
			return "paused"
		}
		return "running"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("next") == "" {
			w.Header().Set("x-next-token", "p2")
			fmt.Fprintf(w, `[{"id": "a", "state": %q}]`, state("a"))
			return
		}
		if page2.Add(1) == 1 {
			w.Header().Set("Retry-After", "5")
			http.Error(w, `{"message":"rate limited"}`, http.StatusTooManyRequests)
			return
		}
		fmt.Fprintf(w, `[{"id": "b", "state": %q}]`, state("b"))
	})
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		paused.Store(r.PathValue("id"), true)
		w.WriteHeader(http.StatusNoContent)
	})
	wr := newLoopWire(t, mux)
	synctest.Test(t, func(t *testing.T) {
		src := wr.source(t, Config{PageTokenHeader: "x-next-token", PageTokenParam: "next"})
		p, err := pause.New(src, pause.Config{})
		require.NoError(t, err)
		rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
		assert.Equal(t, 2, rep.Counts[pause.Preserved], "%v", rep.Err())

		lists := wr.times(http.MethodGet, "/sandboxes")
		require.Len(t, lists, 6, "page 1, page 2 refused; page 1, page 2; page 1, page 2, nothing left")
		assert.Equal(t, 5*time.Second, lists[2].Sub(lists[1]), "listed again when the server asked")
	})
}

// Fault: a Retry-After that is neither seconds nor an HTTP date ("soon",
// "-3", "1.5") was read as no Retry-After without a word. It is still
// ignored (the backoff spaces the retry), and now said: in the error, and
// once in the log for each value the server sends.
func TestMalformedRetryAfterIsIgnoredAndLogged(t *testing.T) {
	for _, v := range []string{"soon", "-3", "1.5"} {
		t.Run(v, func(t *testing.T) {
			w := newLoopWire(t, overloadedList(2, v))
			synctest.Test(t, func(t *testing.T) {
				var logs bytes.Buffer
				src := w.source(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				p, err := pause.New(src, pause.Config{BackOff: constantBackOff(2 * time.Second)})
				require.NoError(t, err)
				rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
				assert.Equal(t, 1, rep.Counts[pause.Preserved], "%v", rep.Err())

				lists := w.times(http.MethodGet, "/sandboxes")
				require.GreaterOrEqual(t, len(lists), 3)
				assert.Equal(t, 2*time.Second, lists[1].Sub(lists[0]), "the backoff's wait")
				assert.Equal(t, 1, strings.Count(logs.String(), "Retry-After is neither a number of seconds nor an HTTP date: ignored"),
					"once for a value repeated:\n%s", logs.String())
				assert.Contains(t, logs.String(), "retry_after="+v)
				assert.Contains(t, logs.String(), "status=429")
				assert.Contains(t, logs.String(), "url="+w.url+"/sandboxes")
			})
		})
	}
	se := &StatusError{Op: "list", URL: "http://h/sandboxes", StatusCode: 429, retryAfter: "soon"}
	assert.Equal(t, `httpsource: list http://h/sandboxes: 429 Too Many Requests (Retry-After "soon" ignored: neither a number of seconds nor an HTTP date)`,
		se.Error())
}

// keyedServer lists n running sandboxes and pauses them, each request
// answered only with the X-API-Key key (401 otherwise).
func keyedServer(n int, key string) http.Handler {
	f := newFakeServer(n)
	f.apiKey = key
	return f.handler()
}

// Fault: with Config.APIKeyFile, a pause refused during a key rotation
// waited out the Preserver's backoff wait in progress when the new key
// reached the file: 30 s into the refusals the default policy waits 5 to
// 15 s, and the last sandbox was preserved that long after the key came.
// The wait now ends when the file changes (read every 100 ms): each
// sandbox is sent again with the new key within 100 ms of it.
func TestPausesRefusedForAnOldKeyAreSentAgainWhenTheFileChanges(t *testing.T) {
	const n, window = 8, 30 * time.Second
	w := newLoopWire(t, keyedServer(n, "k2"))
	synctest.Test(t, func(t *testing.T) {
		vol, cfg := keyVolume(t)
		cfg = Config{APIKeyFile: cfg.APIKeyFile}
		src := w.source(t, cfg)
		sbs := make([]pause.Sandbox, n)
		for i := range sbs {
			sbs[i] = src.Sandbox(sandboxID(i))
		}
		start := time.Now()
		go func() {
			time.Sleep(window)
			vol.write("k2")
		}()
		p, err := pause.New(once(sbs), pause.Config{})
		require.NoError(t, err)
		rep := p.Run(ctxWithDeadline(t, 5*time.Minute), time.Time{})
		require.Equal(t, n, rep.Counts[pause.Preserved], "%v", rep.Err())

		var last time.Time
		for _, e := range rep.Entries {
			assert.Greater(t, e.Attempts, 1, "%s: refused with the old key first", e.ID)
			if e.End.After(last) {
				last = e.End
			}
		}
		after := last.Sub(start) - window
		t.Logf("the last sandbox preserved %v after the key reached the file", after)
		assert.LessOrEqual(t, after, keyPoll, "sent again as the key came")
	})
}

// The listing refused the same way: listed again within 100 ms of the
// key's arrival, where it waited out the backoff too.
func TestListingRefusedForAnOldKeyIsMadeAgainWhenTheFileChanges(t *testing.T) {
	const window = 30 * time.Second
	w := newLoopWire(t, keyedServer(4, "k2"))
	synctest.Test(t, func(t *testing.T) {
		vol, cfg := keyVolume(t)
		src := w.source(t, Config{APIKeyFile: cfg.APIKeyFile})
		start := time.Now()
		go func() {
			time.Sleep(window)
			vol.write("k2")
		}()
		p, err := pause.New(src, pause.Config{})
		require.NoError(t, err)
		rep := p.Run(ctxWithDeadline(t, 5*time.Minute), time.Time{})
		require.Equal(t, 4, rep.Counts[pause.Preserved], "%v", rep.Err())

		lists := w.times(http.MethodGet, "/sandboxes")
		var first time.Time // the first listing after the key came
		for _, at := range lists {
			if at.Sub(start) >= window {
				first = at
				break
			}
		}
		require.False(t, first.IsZero())
		t.Logf("listed %v after the key reached the file (%d listings)", first.Sub(start)-window, len(lists))
		assert.LessOrEqual(t, first.Sub(start)-window, keyPoll, "listed again as the key came")
	})
}

// Fault: a request a timeout of the Source's cut (Config.ListTimeout,
// 10 s by default; Config.PauseTimeout) failed with "no answer before its
// context ended: ... context deadline exceeded", the words of one the
// drain's deadline cut: an operator whose server lists in 12 s read an
// unknown Report and could not tell that the list timeout, which they can
// raise, ended every listing. The error now names the timeout, or the
// cause the caller's context was given (a drain's Force); it is still
// context.DeadlineExceeded (errors.Is) and transient.
func TestRequestCutByATimeoutNamesIt(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", hang)
	mux.HandleFunc("POST /sandboxes/{id}/pause", hang)
	ts := httptest.NewServer(mux)
	defer ts.Close()
	src, err := New(ts.URL, Config{ListTimeout: 50 * time.Millisecond, PauseTimeout: 50 * time.Millisecond})
	require.NoError(t, err)

	_, err = src.List(t.Context())
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "httpsource: list: no answer before the list timeout (Config.ListTimeout, 50ms) ended it: Get ")
	assert.False(t, isPermanent(err))

	err = src.Sandbox("a").Preserve(t.Context())
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "httpsource: pause: no answer before the pause timeout (Config.PauseTimeout, 50ms) ended it: Post ")

	p, err := pause.New(src, pause.Config{BackOff: constantBackOff(100 * time.Millisecond)})
	require.NoError(t, err)
	rep := p.Run(ctxWithDeadline(t, 300*time.Millisecond), time.Time{})
	assert.True(t, rep.Unknown)
	assert.Contains(t, rep.ListErr, "the list timeout (Config.ListTimeout, 50ms) ended it")

	src, err = New(ts.URL, Config{ListTimeout: -1})
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(t.Context())
	forced := errors.New("drain: forced")
	time.AfterFunc(50*time.Millisecond, func() { cancel(forced) })
	_, err = src.List(ctx)
	assert.ErrorIs(t, err, forced)
	assert.ErrorContains(t, err, "httpsource: list: no answer before its context ended (drain: forced): Get ")
}

// acceptedThenOverloaded answers a pause 202 Accepted and the first n
// listings after it 429 with the Retry-After retryAfter; later ones list
// the sandbox paused.
func acceptedThenOverloaded(n int, retryAfter string) http.Handler {
	var lists atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		if lists.Add(1) <= int64(n) {
			w.Header().Set("Retry-After", retryAfter)
			http.Error(w, `{"message":"rate limited"}`, http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, `[{"id": "a", "state": "paused"}]`)
	})
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	})
	return mux
}

// Fault: after a 202 Accepted to a pause, the listings that confirm it
// were polled every 50 ms to 1 s whatever the server answered: a listing
// answered 429 with "Retry-After: 3" was listed again 0.1 s later. It is
// now listed again when the server asked, and a Retry-After past the
// pause's deadline ends the confirmation at once, saying so, where it was
// polled to the deadline, the server answering 429 each time.
func TestAcceptedPauseIsConfirmedWhenTheOverloadedListingAsks(t *testing.T) {
	w := newLoopWire(t, acceptedThenOverloaded(1, "3"))
	synctest.Test(t, func(t *testing.T) {
		src := w.source(t, Config{})
		require.NoError(t, src.Sandbox("a").Preserve(ctxWithDeadline(t, time.Minute)))
		lists := w.times(http.MethodGet, "/sandboxes")
		require.Len(t, lists, 2)
		assert.Equal(t, 3*time.Second, lists[1].Sub(lists[0]), "listed again when the server asked")
	})
}

func TestAcceptedPauseWhoseListingAsksPastTheDeadlineIsNotPolledToIt(t *testing.T) {
	w := newLoopWire(t, acceptedThenOverloaded(1000, "120"))
	synctest.Test(t, func(t *testing.T) {
		src := w.source(t, Config{})
		start := time.Now()
		err := src.Sandbox("a").Preserve(ctxWithDeadline(t, time.Minute))
		assert.ErrorContains(t, err, "answered 202 Accepted, not confirmed: the last listing failed, and asks for none before")
		assert.ErrorContains(t, err, "past the deadline")
		assert.ErrorContains(t, err, "429 Too Many Requests (retry after 2m0s)")
		assert.Len(t, w.times(http.MethodGet, "/sandboxes"), 1)
		assert.Equal(t, acceptedPollFirst, time.Since(start), "the first poll, then none")
	})
}

// Fault: a refusal during a key rotation whose next backoff wait ended
// past the phase deadline was not retried: the sandbox Failed there, 8 s
// before the phase's end with a 10 s policy, and a key that reached the
// file in those last seconds preserved nothing; the listing the same, the
// Report unknown. The wait is now made to the deadline, and the retry
// follows if the file changed before it.
func TestKeyInTheLastSecondsOfThePhaseIsUsed(t *testing.T) {
	const phase, keyAt = 38 * time.Second, 35 * time.Second
	for _, listing := range []bool{false, true} {
		t.Run(fmt.Sprintf("listing refused %v", listing), func(t *testing.T) {
			w := newLoopWire(t, keyedServer(2, "k2"))
			synctest.Test(t, func(t *testing.T) {
				vol, cfg := keyVolume(t)
				src := w.source(t, Config{APIKeyFile: cfg.APIKeyFile})
				var l pause.Lister = once([]pause.Sandbox{src.Sandbox(sandboxID(0)), src.Sandbox(sandboxID(1))})
				if listing {
					l = src
				}
				start := time.Now()
				time.AfterFunc(keyAt, func() { vol.write("k2") })
				p, err := pause.New(l, pause.Config{BackOff: constantBackOff(10 * time.Second)})
				require.NoError(t, err)
				rep := p.Run(ctxWithDeadline(t, phase), time.Time{})
				require.Equal(t, 2, rep.Counts[pause.Preserved], "%v", rep.Err())
				for _, e := range rep.Entries {
					assert.LessOrEqual(t, e.End.Sub(start), keyAt+keyPoll, e.ID)
				}
			})
		})
	}
}

// overloadedPauses answers every pause of sandbox "a" 429 with the
// Retry-After aAfter, and the first of "b" 429 with Retry-After: 3, its
// later ones 204.
func overloadedPauses(aAfter string) http.Handler {
	var bPauses atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.PathValue("id") == "a":
			w.Header().Set("Retry-After", aAfter)
		case bPauses.Add(1) == 1:
			w.Header().Set("Retry-After", "3")
		default:
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.Error(w, `{"message":"rate limited"}`, http.StatusTooManyRequests)
	})
	return mux
}

// preserveAB runs a Preserver of limit 1 over sandboxes "a" and "b" of a
// Source over w, its phase deadline phase from now and its hard deadline
// hard from now (0: none), and returns its Report and when it started.
// Call it inside the bubble.
func preserveAB(t *testing.T, w *loopWire, phase, hard time.Duration) (*pause.Report, time.Time) {
	src := w.source(t, Config{})
	p, err := pause.New(once([]pause.Sandbox{src.Sandbox("a"), src.Sandbox("b")}), pause.Config{Limit: 1})
	require.NoError(t, err)
	start := time.Now()
	var h time.Time
	if hard > 0 {
		h = start.Add(hard)
	}
	return p.Run(ctxWithDeadline(t, phase), h), start
}

// Fault: a pause the server answered 429 with a Retry-After past the
// deadline failed at once (the Source does not wait for it, nor send the
// pause again before it), and the Preserver retried it on its backoff to
// the phase deadline, each retry failing at once, the sandbox holding its
// slot all the while: with one slot, the next sandbox started only when
// it gave up, 59 s into a 60 s phase.
// The error now carries the time the server named (RetryAt), and the
// Preserver ends the sandbox Failed at once, naming it.
func TestPauseRetryAfterPastTheDeadlineFreesItsSlot(t *testing.T) {
	w := newLoopWire(t, overloadedPauses("120"))
	synctest.Test(t, func(t *testing.T) {
		rep, start := preserveAB(t, w, time.Minute, 0)
		a, b := entry(t, rep, "a"), entry(t, rep, "b")
		assert.Equal(t, pause.Failed, a.Outcome, a.Error)
		assert.Contains(t, a.Error, "429 Too Many Requests (retry after 2m0s)")
		assert.Contains(t, a.Error, "(not retried: the answer asks for no retry before "+
			start.Add(2*time.Minute).UTC().Format(time.RFC3339Nano)+", past the phase deadline")
		assert.Equal(t, 1, a.Attempts)
		assert.Zero(t, a.End.Sub(start), "a's slot freed at once")
		assert.Len(t, w.times(http.MethodPost, "/sandboxes/a/pause"), 1)

		// A Retry-After that fits is waited once, by the Source: the
		// Preserver sees no error, and adds no wait of its own.
		assert.Equal(t, pause.Preserved, b.Outcome, b.Error)
		assert.Equal(t, 1, b.Attempts)
		bs := w.times(http.MethodPost, "/sandboxes/b/pause")
		require.Len(t, bs, 2)
		assert.Equal(t, 3*time.Second, bs[1].Sub(bs[0]))
		assert.Zero(t, bs[0].Sub(start))
	})
}

// Fault: a pause answered 429 with a Retry-After that ends past the
// phase deadline but before the hard deadline was waited for by the
// Source, whose only deadline is its context's, the hard one, and sent
// again past the phase deadline: a new start the Preserver makes none of
// (nor a retry of its own) there, which kept the Run to it and took from
// the drain's steps after the phase the time they are laid out in when
// they start. The Source now keeps to the phase deadline of the Run that
// calls it (follow.StartBy): the error carries the server's time, and the
// Preserver ends the sandbox Failed at once, naming it, and frees its
// slot. A Retry-After that ends before the phase deadline is still waited
// by the Source.
//
//	0 s   limit 1: "a" answered 429, Retry-After: 20 (before: waited for)
//	      now: "a" failed; "b" answered 429, Retry-After: 3
//	3 s   "b" sent again: preserved; the Run returns
//	10 s  phase deadline (before: "b" not started, its slot held by "a")
//	20 s  before: "a" sent again (and at 40 s, 60 s), timed out at the
//	60 s  hard deadline, when the Run returned
func TestPauseRetryAfterPastThePhaseDeadlineIsNotWaitedToTheHardDeadline(t *testing.T) {
	w := newLoopWire(t, overloadedPauses("20"))
	synctest.Test(t, func(t *testing.T) {
		rep, start := preserveAB(t, w, 10*time.Second, time.Minute)
		took := time.Since(start)
		a, b := entry(t, rep, "a"), entry(t, rep, "b")
		assert.Equal(t, pause.Failed, a.Outcome, a.Error)
		assert.Contains(t, a.Error, "429 Too Many Requests (retry after 20s)")
		assert.Contains(t, a.Error, "(not retried: the answer asks for no retry before "+
			start.Add(20*time.Second).UTC().Format(time.RFC3339Nano)+", past the phase deadline")
		assert.Zero(t, a.End.Sub(start), "failed at once")
		assert.Len(t, w.times(http.MethodPost, "/sandboxes/a/pause"), 1, "not sent again past the phase deadline")

		assert.Equal(t, pause.Preserved, b.Outcome, b.Error)
		bs := w.times(http.MethodPost, "/sandboxes/b/pause")
		require.Len(t, bs, 2)
		assert.Zero(t, bs[0].Sub(start), "its slot freed at once")
		assert.Equal(t, 3*time.Second, bs[1].Sub(bs[0]), "a Retry-After within the phase: waited by the Source")
		assert.Equal(t, 3*time.Second, took, "the Run returns as b is preserved, not when a is sent again")
	})
}

// slowPauses holds every pause request for hold, in the bubble's time,
// before it goes on the wire: a server that pauses synchronously, slowly.
type slowPauses struct {
	w    *loopWire
	hold time.Duration
}

func (s slowPauses) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/pause") {
		time.Sleep(s.hold)
	}
	return s.w.RoundTrip(r)
}

// Fault: a pause waiting for one of the Source's request slots
// (Config.MaxInFlight, or a limit an overload answer lowered) waited until
// its context's end, the Run's hard deadline, and was sent when a slot
// freed past the phase deadline: a new start the Preserver makes none of
// there (row 1161's fault in the Source's other wait), which held the Run
// to its end. The wait now ends at the phase deadline, and the pause is
// not sent.
//
//	0 s    limit 2, MaxInFlight 1: "a" sent (each pause takes 15 s); "b" waits for the slot
//	10 s   phase deadline: "b" failed, not sent (before: sent at 15 s)
//	15 s   "a" preserved; the Run returns (before: at 30 s, "b" preserved)
func TestPauseWaitingForARequestSlotIsNotSentPastThePhaseDeadline(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	w := newLoopWire(t, mux)
	synctest.Test(t, func(t *testing.T) {
		src, err := New(w.url, Config{MaxInFlight: 1, Client: &http.Client{Transport: slowPauses{w, 15 * time.Second}}})
		require.NoError(t, err)
		p, err := pause.New(once([]pause.Sandbox{src.Sandbox("a"), src.Sandbox("b")}), pause.Config{Limit: 2})
		require.NoError(t, err)
		start := time.Now()
		rep := p.Run(ctxWithDeadline(t, 10*time.Second), start.Add(time.Minute))
		// Both pauses start at 0 s, each in its own worker: which of the two asks
		// the Source for its one slot first is their goroutines' race, which "b"
		// won in 11 of 1000 runs. The timeline is the same either way: "a" below
		// is the one sent, "b" the one that waited.
		a, b := "a", "b"
		if len(w.times(http.MethodPost, "/sandboxes/a/pause")) == 0 {
			a, b = "b", "a"
		}
		assert.Equal(t, 15*time.Second, time.Since(start), "the Run returns as a is preserved")
		assert.Equal(t, pause.Preserved, entry(t, rep, a).Outcome)
		waited := entry(t, rep, b)
		assert.Equal(t, pause.Failed, waited.Outcome, waited.Error)
		assert.Contains(t, waited.Error, "waiting for a request slot: the phase deadline passed: the pause is not sent after it (Config.MaxInFlight: 1 at once)")
		assert.Equal(t, 10*time.Second, waited.End.Sub(start))
		assert.Empty(t, w.times(http.MethodPost, "/sandboxes/"+b+"/pause"), "not sent")
	})
}

// Fault: a pause answered 429 with a Retry-After ending at the phase
// deadline itself was taken to fit before it: the Source waited to the
// deadline, and its request slot then being free, sent the pause again
// there (in real time a timer fires after its time, so past it), where
// the Preserver starts nothing at its deadline and no wait ending there
// is made; with limit 1, "a" held the Run's only slot all the while and
// "b" was never started. A time at the send-by time does not fit, as the
// Preserver's rule says (row 1282).
//
//	0 s   limit 1: "a" answered 429, Retry-After: 10 (the phase deadline)
//	      now: "a" failed at once; "b" answered 429, Retry-After: 3
//	3 s   "b" sent again: preserved; the Run returns
//	10 s  before: "a" sent again, answered 429 again, failed; "b" not started
func TestPauseRetryAfterEndingAtThePhaseDeadlineIsNotWaited(t *testing.T) {
	w := newLoopWire(t, overloadedPauses("10"))
	synctest.Test(t, func(t *testing.T) {
		rep, start := preserveAB(t, w, 10*time.Second, time.Minute)
		a, b := entry(t, rep, "a"), entry(t, rep, "b")
		assert.Equal(t, pause.Failed, a.Outcome, a.Error)
		assert.Contains(t, a.Error, "(not retried: the answer asks for no retry before "+
			start.Add(10*time.Second).UTC().Format(time.RFC3339Nano))
		assert.Len(t, w.times(http.MethodPost, "/sandboxes/a/pause"), 1, "not sent again at the phase deadline")
		assert.Zero(t, a.End.Sub(start), "failed at once")
		assert.Equal(t, pause.Preserved, b.Outcome, b.Error)
		assert.Equal(t, 3*time.Second, time.Since(start))
	})
}

// Fault: a pause answered 202 Accepted whose confirming listing asks
// for no listing before a time past the deadline (row 1104's error) was
// retried by the Preserver's backoff to the phase deadline: it sent the
// pause again and again, each followed by a listing, the overloaded
// server getting both at every retry. The Preserver now reads the
// listing's RetryAt in the Preserve's error and ends the sandbox Failed
// at once, naming it.
func TestAcceptedPauseWhoseListingAsksPastTheDeadlineIsNotRetried(t *testing.T) {
	w := newLoopWire(t, acceptedThenOverloaded(1000, "120"))
	synctest.Test(t, func(t *testing.T) {
		src := w.source(t, Config{})
		p, err := pause.New(once([]pause.Sandbox{src.Sandbox("a")}), pause.Config{})
		require.NoError(t, err)
		start := time.Now()
		rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
		a := entry(t, rep, "a")
		assert.Equal(t, pause.Failed, a.Outcome, a.Error)
		assert.Contains(t, a.Error, "answered 202 Accepted, not confirmed: the last listing failed, and asks for none before")
		assert.Contains(t, a.Error, "(not retried: the answer asks for no retry before "+
			start.Add(acceptedPollFirst+2*time.Minute).UTC().Format(time.RFC3339Nano)+", past the phase deadline")
		assert.Len(t, w.times(http.MethodPost, "/sandboxes/a/pause"), 1)
		assert.Len(t, w.times(http.MethodGet, "/sandboxes"), 1)
		assert.Equal(t, acceptedPollFirst, a.End.Sub(start))
	})
}
