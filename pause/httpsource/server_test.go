package httpsource

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serial says how a fakeServer treats a pause that arrives while another one
// is running.
type serial int

const (
	parallel serial = iota // no limit
	reject                 // 429 with Retry-After
	block                  // waits its turn
)

// fakeServer is a sandbox server with AgentENV's API: GET /sandboxes and
// POST /sandboxes/{id}/pause. Its pauses take pauseDelay; they can fail,
// and run one at a time.
type fakeServer struct {
	apiKey     string
	pauseDelay time.Duration
	serial     serial
	retryAfter string         // Retry-After on a 429 when rejecting
	failFirst  map[string]int // id -> 500s to answer before pausing

	slot chan struct{} // the one pause slot, for reject and block

	mu         sync.Mutex
	states     map[string]string
	order      []string
	requests   map[string]int // pause requests per id
	rejected   int            // 429 answers
	inPause    int
	maxInPause int
	busy       time.Duration // total time a pause was running
	busySince  time.Time
}

func newFakeServer(n int, opts ...func(*fakeServer)) *fakeServer {
	f := &fakeServer{
		states:     map[string]string{},
		requests:   map[string]int{},
		failFirst:  map[string]int{},
		retryAfter: "1",
		slot:       make(chan struct{}, 1),
	}
	for i := range n {
		f.add(sandboxID(i), "running")
	}
	for _, o := range opts {
		o(f)
	}
	return f
}

func sandboxID(i int) string { return "sb-" + string(rune('a'+i/26)) + string(rune('a'+i%26)) }

func (f *fakeServer) add(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.states[id]; !ok {
		f.order = append(f.order, id)
	}
	f.states[id] = state
}

func (f *fakeServer) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.states, id)
}

func (f *fakeServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", f.list)
	mux.HandleFunc("POST /sandboxes/{id}/pause", f.pause)
	return mux
}

// start serves f on a real loopback listener until the test ends.
func (f *fakeServer) start(t testing.TB) string {
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func (f *fakeServer) authorized(w http.ResponseWriter, r *http.Request) bool {
	if f.apiKey != "" && r.Header.Get("X-API-Key") != f.apiKey {
		http.Error(w, `{"message":"unauthorized"}`, http.StatusUnauthorized)
		return false
	}
	return true
}

func (f *fakeServer) list(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	type item struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	f.mu.Lock()
	out := []item{}
	for _, id := range f.order {
		if st, ok := f.states[id]; ok {
			out = append(out, item{id, st})
		}
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (f *fakeServer) pause(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	id := r.PathValue("id")
	f.mu.Lock()
	f.requests[id]++
	state, ok := f.states[id]
	f.mu.Unlock()
	switch {
	case !ok:
		http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
		return
	case state != "running":
		http.Error(w, `{"message":"not running"}`, http.StatusConflict)
		return
	}
	if !f.takeSlot(w, r) {
		return
	}
	defer f.freeSlot()
	if f.fail(id) {
		http.Error(w, `{"message":"pause failed, try again"}`, http.StatusInternalServerError)
		return
	}
	f.enter()
	time.Sleep(f.pauseDelay) // a real pause is not cancelled by the client going away
	f.leave(id)
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeServer) takeSlot(w http.ResponseWriter, r *http.Request) bool {
	switch f.serial {
	case reject:
		select {
		case f.slot <- struct{}{}:
			return true
		default:
			f.mu.Lock()
			f.rejected++
			f.mu.Unlock()
			w.Header().Set("Retry-After", f.retryAfter)
			http.Error(w, `{"message":"a pause is running"}`, http.StatusTooManyRequests)
			return false
		}
	case block:
		select {
		case f.slot <- struct{}{}:
			return true
		case <-r.Context().Done():
			return false
		}
	}
	return true
}

func (f *fakeServer) freeSlot() {
	if f.serial != parallel {
		<-f.slot
	}
}

func (f *fakeServer) fail(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failFirst[id] > 0 {
		f.failFirst[id]--
		return true
	}
	return false
}

func (f *fakeServer) enter() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inPause == 0 {
		f.busySince = time.Now()
	}
	f.inPause++
	f.maxInPause = max(f.maxInPause, f.inPause)
}

func (f *fakeServer) leave(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inPause--
	if f.inPause == 0 {
		f.busy += time.Since(f.busySince)
	}
	f.states[id] = "paused"
}

// paused returns the IDs in state paused, sorted.
func (f *fakeServer) paused() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id, st := range f.states {
		if st == "paused" {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func (f *fakeServer) stats() (rejected, maxInPause int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rejected, f.maxInPause
}

// handlerTransport serves requests with a handler in-process, so that code
// under testing/synctest sees the handler's sleeps in virtual time. Tests
// that need the network use fakeServer.start instead.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.h.ServeHTTP(rec, r)
	}()
	select {
	case <-done:
		return rec.Result(), nil
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
}

// inProcess returns a Source over h without a network, for synctest.
func inProcess(t testing.TB, h http.Handler, c Config) *Source {
	t.Helper()
	c.Client = &http.Client{Transport: handlerTransport{h}}
	s, err := New("http://sandbox-server.test", c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ctxWithDeadline(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// state returns id's state, "" when the server does not have it.
func (f *fakeServer) state(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.states[id]
}
