package httpsource

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/pause"
)

// Fault: with no pagination configured, the Source read the first page of
// a paginated listing and took it for all of it: pointed at AgentENV's GET
// /v2/sandboxes without the AgentENV preset (its path and ID field set by
// hand), 37 of 200 sandboxes were listed, and the drain preserved those
// and never saw the others, missing from the Report. The answer said more
// pages follow (x-next-token); the listing now fails, naming the fix.
func TestListOfAPaginatedAnswerWithoutPaginationIsAnError(t *testing.T) {
	_, url, counts := agentenv(t, 200, fakeagentenv.Config{PageSize: 37})
	src, err := New(url, Config{ListPath: "/v2/sandboxes", IDField: "sandboxID"})
	require.NoError(t, err)
	sbs, err := src.List(t.Context())
	require.Error(t, err, "listed %d", len(sbs))
	assert.True(t, isPermanent(err), "a configuration to change, not a failure to retry")
	assert.ErrorContains(t, err, "x-next-token")
	assert.ErrorContains(t, err, `Config.PageTokenHeader "x-next-token"`, "the fix")
	assert.ErrorContains(t, err, "AgentENV()", "the fix")
	assert.EqualValues(t, 1, counts.v2.Load())

	// Through the Preserver: the Report says the listing failed, and why.
	p, err := pause.New(src, pause.Config{})
	require.NoError(t, err)
	rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})
	assert.Contains(t, rep.ListErr, "x-next-token")
	assert.Empty(t, rep.Entries)
}

// A listing that fits on one page has no next token: the same Config
// lists it, as it does the deprecated, unpaginated GET /sandboxes.
func TestListOfASinglePageWithoutPaginationIsWhole(t *testing.T) {
	_, url, _ := agentenv(t, 30, fakeagentenv.Config{PageSize: 37})
	src, err := New(url, Config{ListPath: "/v2/sandboxes", IDField: "sandboxID"})
	require.NoError(t, err)
	sbs, err := src.List(t.Context())
	require.NoError(t, err)
	assert.Len(t, sbs, 30)

	src, err = New(url, Config{ListPath: "/sandboxes", IDField: "sandboxID"})
	require.NoError(t, err)
	sbs, err = src.List(t.Context())
	require.NoError(t, err)
	assert.Len(t, sbs, 30)
}

// A pagination header that is not the one the server sends (a typo) ends
// the listing at its first page too: the error names the header the
// server sent.
func TestListWithTheWrongPageTokenHeaderIsAnError(t *testing.T) {
	_, url, _ := agentenv(t, 200, fakeagentenv.Config{PageSize: 37})
	c := AgentENV()
	c.PageTokenHeader = "x-next-page"
	src, err := New(url, c)
	require.NoError(t, err)
	_, err = src.List(t.Context())
	assert.True(t, isPermanent(err), "%v", err)
	assert.ErrorContains(t, err, `Config.PageTokenHeader "x-next-token"`)
	assert.ErrorContains(t, err, `not "x-next-page"`)
}

// A Link header with rel="next" (RFC 8288) says a next page follows, which
// the Source cannot follow: an error naming it. One with other relations
// only (prev, last, first: the last page's) is no next page.
func TestListWhoseAnswerLinksANextPageIsAnError(t *testing.T) {
	for _, tc := range []struct {
		link string
		more bool
	}{
		{`<http://s/sandboxes?page=2>; rel="next"`, true},
		{`<http://s/sandboxes?page=1>; rel="prev", <http://s/sandboxes?page=3>; rel="next", <http://s/sandboxes?page=9>; rel="last"`, true},
		{`<http://s/sandboxes?page=2&a=b,c>; title="x, y"; rel="last next"`, true},
		{`<http://s/sandboxes?page=2>; REL=next`, true},
		{`<http://s/sandboxes?page=1>; rel="prev", <http://s/sandboxes?page=1>; rel="first"`, false},
		{`<http://s/next>; rel="nextish"`, false},
		{`<http://s/x>; title="rel=next"`, false},
		{``, false},
	} {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
			if tc.link != "" {
				w.Header().Set("Link", tc.link)
			}
			_, _ = w.Write([]byte(`[{"id": "a", "state": "running"}]`))
		})
		ts := httptest.NewServer(mux)
		src, err := New(ts.URL, Config{})
		require.NoError(t, err)
		sbs, err := src.List(t.Context())
		ts.Close()
		if !tc.more {
			assert.NoError(t, err, tc.link)
			assert.Len(t, sbs, 1, tc.link)
			continue
		}
		assert.True(t, isPermanent(err), "%s: %v", tc.link, err)
		assert.ErrorContains(t, err, `rel="next"`, tc.link)
		assert.ErrorContains(t, err, "Config.ListPath", "the fix")
	}
}

// Malformed Link headers say nothing, and reading them ends.
func TestNextLinkReadsOnlyWellFormedLinks(t *testing.T) {
	for _, v := range []string{
		`garbage`, `<unterminated`, `<x>; rel`, `<x>; rel="next`, `<x>; rel=`, `<x>;;;, ,;`,
		`<x> rel="next"`, `rel="next"`, `<x>; title="\"; rel=next"`, `;;<x>; rel=next`,
	} {
		link, ok := nextLink(http.Header{"Link": {v}})
		assert.False(t, ok, "%s: %s", v, link)
	}
	link, ok := nextLink(http.Header{"Link": {`<a>; rel=prev`, `<b>; title="a\"b"; rel=next`}})
	assert.True(t, ok)
	assert.Equal(t, "b", link, "a second Link header is read too")
}

// Fault: Config.PageTokenHeader, a header's name as APIKeyHeader is, was
// not checked at New (row 473 checked APIKeyHeader and PauseMethod). One
// copied with its colon from curl -i ("X-Page-Token: p2") matches no
// response header: the listing ended at its first page and passed for
// the whole of it, the sandboxes on the others neither preserved nor in
// the Report, without an error (a server whose token header is not
// AgentENV's, which the Source would have recognised). New now fails,
// naming the field.
func TestPageTokenHeaderNoAnswerCanCarryIsRefusedAtNew(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("page") == "" {
			w.Header().Set("X-Page-Token", "p2") // one more page
			_, _ = w.Write([]byte(`[{"id":"a","state":"running"}]`))
			return
		}
		_, _ = w.Write([]byte(`[{"id":"b","state":"running"}]`))
	}))
	defer srv.Close()

	src, err := New(srv.URL, Config{PageTokenHeader: "X-Page-Token", PageTokenParam: "page"})
	require.NoError(t, err)
	sbs, err := src.List(t.Context())
	require.NoError(t, err)
	require.Len(t, sbs, 2, "the header's name: both pages")

	src, err = New(srv.URL, Config{PageTokenHeader: "X-Page-Token:", PageTokenParam: "page"})
	if err == nil {
		sbs, err := src.List(t.Context())
		t.Fatalf("New passed it; at the drain the listing gave %d of 2 sandboxes (error %v)", len(sbs), err)
	}
	assert.ErrorContains(t, err, `httpsource: Config.PageTokenHeader must be a header name`)
	assert.ErrorContains(t, err, `got "X-Page-Token:"`)
}

// Fault: AgentENV's GET /v2/sandboxes answered its first page and failed
// every next one (503): the Source dropped the first page with the error,
// and the Preserver, knowing no sandbox, paused none of the 100, its
// Report unknown. List now returns the pages that answered with the
// error (a pause.Lister's partial listing): the Preserver pauses page 1's
// 37, and lists again; page 1 (AgentENV's listing has no state filter)
// then holds the same 37, paused, and page 2 still fails, so the other 63
// are out of reach, and the Report says the listing was incomplete.
func TestListReturnsThePagesThatAnsweredWithTheError(t *testing.T) {
	srv, err := fakeagentenv.New(fakeagentenv.Config{APIKey: "k", PageSize: 37, PauseBase: time.Millisecond})
	require.NoError(t, err)
	for range 100 {
		_, err := srv.Create(512)
		require.NoError(t, err)
	}
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/sandboxes" && r.URL.Query().Has("nextToken") {
			http.Error(w, "page store unavailable", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	src, err := New(ts.URL, agentENVWithKey("k"))
	require.NoError(t, err)

	sbs, err := src.List(t.Context())
	require.Error(t, err)
	assert.ErrorContains(t, err, "503")
	assert.False(t, isPermanent(err), "a failed page is retried")
	assert.Len(t, sbs, 37, "page 1's sandboxes, with the error")

	p, err := pause.New(src, pause.Config{Limit: 16})
	require.NoError(t, err)
	rep := p.Run(ctxWithDeadline(t, 5*time.Second), time.Time{})
	assert.Equal(t, 37, rep.Counts[pause.Preserved])
	paused := 0
	for _, st := range srv.States() {
		if st == fakeagentenv.Paused {
			paused++
		}
	}
	assert.Equal(t, 37, paused)
	assert.False(t, rep.Unknown)
	assert.True(t, rep.Incomplete)
	require.Error(t, rep.Err())
	assert.Contains(t, rep.Err().Error(), "503")
}

// Fault: a page after the first answered with a client error, the mark of
// a page token the server no longer takes (expired: Kubernetes answers an
// expired continue token 410 Gone, other APIs 400), was a permanent
// listing error, as a wrong path or a refused key is: once a pass found
// nothing new on page 1, the Preserver listed no more, and the sandboxes
// of the pages after it were neither preserved nor in the Report. Page 1,
// with the same path and key, was answered: only the token was refused,
// and a listing made again from page 1 gets a new one. The listing is now
// made again. In virtual time, a server whose continue tokens live 1 s
// from their listing's start, and whose page 1 takes 1.5 s under load for
// its first two listings:
//
//	0 s      page 1: a, b (1.5 s); page 2: 410, expired; a, b paused
//	1.5 s    page 1: none running (1.5 s); page 2: 410, expired
//	3 s+     page 1 at once; page 2: c, paused
func TestListingWhosePageTokenExpiredIsMadeAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		listings := 0
		paused := map[string]bool{}
		running := func(ids ...string) string {
			var out []string
			for _, id := range ids {
				if !paused[id] {
					out = append(out, fmt.Sprintf(`{"id":%q,"state":"running"}`, id))
				}
			}
			return "[" + strings.Join(out, ",") + "]"
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
			token := r.URL.Query().Get("continue")
			if token == "" { // page 1: the token names the listing's start
				mu.Lock()
				listings++
				loaded := listings <= 2
				mu.Unlock()
				start := time.Now()
				if loaded {
					time.Sleep(1500 * time.Millisecond)
				}
				w.Header().Set("X-Continue", strconv.FormatInt(start.UnixNano(), 10))
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprint(w, running("a", "b"))
				return
			}
			if ns, _ := strconv.ParseInt(token, 10, 64); time.Since(time.Unix(0, ns)) > time.Second {
				http.Error(w, `{"message":"the provided continue token has expired"}`, http.StatusGone)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprint(w, running("c"))
		})
		mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			paused[r.PathValue("id")] = true
			w.WriteHeader(http.StatusNoContent)
		})
		src := inProcess(t, mux, Config{PageTokenHeader: "X-Continue", PageTokenParam: "continue"})
		p, err := pause.New(src, pause.Config{})
		require.NoError(t, err)
		rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})

		assert.Equal(t, 3, rep.Counts[pause.Preserved], "%+v", rep.Entries)
		assert.False(t, rep.Incomplete, "a listing made again was complete: %s", rep.ListErr)
		mu.Lock()
		defer mu.Unlock()
		assert.True(t, paused["c"], "the sandbox of page 2")
	})
}
