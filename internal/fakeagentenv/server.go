package fakeagentenv

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sandbox states. The API shows only running and paused
// (src/api/impls/sandbox.rs maps pausing, snapshotting and forking to
// paused, every other state to running); pausing, resuming, snapshotting,
// forking and killing are the transitional states a pause, a resume, a
// snapshot, a fork and a deletion pass through.
const (
	Running      = "running"
	Pausing      = "pausing"
	Paused       = "paused"
	Resuming     = "resuming"
	Snapshotting = "snapshotting"
	Forking      = "forking"
	Killing      = "killing"
)

// shown is the state the API shows for an internal state.
func shown(state string) string {
	if state == Pausing || state == Paused || state == Snapshotting || state == Forking {
		return Paused
	}
	return Running
}

// A Sandbox is AgentENV's ListedSandbox, as GET /v2/sandboxes and GET
// /sandboxes answer it.
type Sandbox struct {
	SandboxID  string            `json:"sandboxID"`
	TemplateID string            `json:"templateID"`
	State      string            `json:"state"`
	StartedAt  time.Time         `json:"startedAt"`
	EndAt      time.Time         `json:"endAt"`
	CPUCount   int               `json:"cpuCount"`
	MemoryMB   int               `json:"memoryMB"`
	DiskSizeMB int               `json:"diskSizeMB"`
	Metadata   map[string]string `json:"metadata"`
}

// DefaultPageSize and MaxPageSize bound a page of GET /v2/sandboxes.
const (
	DefaultPageSize = 100
	MaxPageSize     = 100
)

// HeaderNextToken is the response header that carries the next page's
// token; the request sends it back as the nextToken query parameter.
const HeaderNextToken = "x-next-token"

// Config configures a Server.
type Config struct {
	// APIKey, when set, must come in the X-API-Key header of every API
	// request (401 otherwise). GET /health needs none. SetAPIKey changes
	// it.
	APIKey string
	// PageSize is the default page of GET /v2/sandboxes (limit overrides
	// it, up to MaxPageSize); default DefaultPageSize.
	PageSize int
	// NoV2 makes GET /v2/sandboxes answer 404, as a server from before it.
	NoV2 bool
	// PauseBase + memoryMB/1024 x PausePerGiB is how long a pause takes.
	PauseBase   time.Duration
	PausePerGiB time.Duration
	// StateDir, when set, receives one JSON record per paused sandbox
	// (<sandboxID>.json), and the records found there at New are loaded
	// back as paused sandboxes. Only paused sandboxes survive the process.
	StateDir string
	// FailFirst makes the first pause of every FailFirst-th sandbox (by
	// creation order) answer 500 without pausing it; 0: none.
	FailFirst int
	// FailTerminal makes the first pause of every FailTerminal-th sandbox
	// (by creation order) fail terminally, as AgentENV's pause does when
	// the VM cannot be put back (src/orchestrator/service.rs,
	// err.is_terminal()): at the end of the pause's time the sandbox is
	// stopped and removed, the answer is 500, a request that joined the
	// pause answers 404, and so does every later request for it. It takes
	// precedence over FailFirst; 0: none.
	FailTerminal int
	// ConflictWhenPaused makes a pause of a sandbox already paused, or
	// being paused, answer 409 ("sandbox cannot be paused from paused
	// state", or "pausing") at once, as the research note
	// (shared/research/agentenv-and-ateom.md) reads the API spec's 409
	// "already pausing, paused, resuming: list again". AgentENV's
	// pause_sandbox (src/orchestrator/service.rs, since its first release)
	// answers 204 for a paused sandbox and joins a pause in progress,
	// which is the default; a client must get the sandbox's account right
	// under both.
	ConflictWhenPaused bool
	// ResumeWhenNoneRunning resumes that many paused sandboxes (newest
	// first) at the first listing that finds sandboxes paused and none
	// running: users reconnecting to their sandboxes just after a drain's
	// last listing, which AgentENV admits until its own shutdown
	// (Shutdown; resume answers 503 from then on). That listing answers
	// what it found (none running); every request after it sees them
	// running. 0: none.
	ResumeWhenNoneRunning int
}

// A Server is the node API of one AgentENV server. It is safe for
// concurrent use.
type Server struct {
	cfg    Config
	apiKey atomic.Pointer[string] // Config.APIKey, until SetAPIKey

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced at every state change
	sbx       map[string]*Sandbox
	created   int
	failed    map[string]bool // FailFirst already answered 500
	shutdown  bool
	resumed   bool           // ResumeWhenNoneRunning has resumed its sandboxes
	pauses    map[string]int // pause requests per sandbox
	conflicts int            // 409 answers
	inPause   int
	maxPause  int
}

// New returns a Server, with the paused records of StateDir loaded.
func New(cfg Config) (*Server, error) {
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.PageSize > MaxPageSize {
		return nil, fmt.Errorf("fakeagentenv: PageSize %d exceeds %d", cfg.PageSize, MaxPageSize)
	}
	s := &Server{cfg: cfg, changed: make(chan struct{}), sbx: map[string]*Sandbox{}, failed: map[string]bool{}, pauses: map[string]int{}}
	s.apiKey.Store(&cfg.APIKey)
	if cfg.StateDir == "" {
		return s, nil
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("fakeagentenv: %w", err)
	}
	recs, err := LoadRecords(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		r.State = Paused
		s.sbx[r.SandboxID] = &r
	}
	return s, nil
}

// LoadRecords reads the paused records of a state directory, sorted by
// sandboxID.
func LoadRecords(dir string) ([]Sandbox, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	out := make([]Sandbox, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("fakeagentenv: %w", err)
		}
		var sb Sandbox
		if err := json.Unmarshal(b, &sb); err != nil {
			return nil, fmt.Errorf("fakeagentenv: %s: %w", f, err)
		}
		out = append(out, sb)
	}
	slices.SortFunc(out, func(a, b Sandbox) int { return cmp.Compare(a.SandboxID, b.SandboxID) })
	return out, nil
}

// Create adds a running sandbox of memoryMB and returns it, or fails once
// Shutdown has begun (the API answers 503 then).
func (s *Server) Create(memoryMB int) (Sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown {
		return Sandbox{}, errShuttingDown
	}
	s.created++
	now := time.Now().UTC()
	sb := &Sandbox{
		SandboxID:  fmt.Sprintf("i%07d", s.created),
		TemplateID: "base",
		State:      Running,
		StartedAt:  now.Add(time.Duration(s.created) * time.Microsecond), // distinct, in creation order
		EndAt:      now.Add(time.Hour),
		CPUCount:   2,
		MemoryMB:   memoryMB,
		DiskSizeMB: 10240,
		Metadata:   map[string]string{"n": strconv.Itoa(s.created)},
	}
	s.sbx[sb.SandboxID] = sb
	return *sb, nil
}

// Remove deletes a sandbox, as DELETE /sandboxes/{sandboxID} does, and
// reports whether it existed.
func (s *Server) Remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.sbx[id]
	delete(s.sbx, id)
	s.broadcastLocked()
	return ok
}

// broadcastLocked wakes every request waiting for a state change; the
// caller holds s.mu.
func (s *Server) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// setState moves a sandbox to state, if it still exists.
func (s *Server) setState(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb, ok := s.sbx[id]; ok {
		sb.State = state
		s.broadcastLocked()
	}
}

// waitWhileUntilLocked waits until the sandbox has left state (or is gone)
// and returns the state it is in ("" when gone) and true, or gives up when
// timeout fires (nil: never), returning state and false. The caller holds
// s.mu; it is released while waiting.
func (s *Server) waitWhileUntilLocked(id, state string, timeout <-chan time.Time) (string, bool) {
	for {
		sb, ok := s.sbx[id]
		if !ok {
			return "", true
		}
		if sb.State != state {
			return sb.State, true
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
		case <-timeout:
			s.mu.Lock()
			return state, false
		}
	}
}

// TransitionWait is how long Shutdown waits for a sandbox in a
// transitional state (resuming, snapshotting, pausing) to leave it, as
// AgentENV's run_shutdown_cleanup waits 60 s for each, and how long a
// pause that joined a pause in progress waits for it (wait_for_transition's
// WAIT_TRANSITION_TIMEOUT).
const TransitionWait = 60 * time.Second

// BeginResume starts the resume of a paused sandbox, as POST
// /sandboxes/{sandboxID}/connect does for a paused one: the sandbox is
// resuming (listed as running without a state filter, not under
// state=running; a pause answers 409) until done is called, and running
// after.
func (s *Server) BeginResume(id string) (done func(), err error) {
	return s.transition(id, Paused, Resuming)
}

// Snapshot starts a snapshot of a running sandbox, as POST
// /sandboxes/{sandboxID}/snapshots does: the sandbox is snapshotting
// (listed as paused, not under state=running; a pause answers 409) until
// done is called, and running again after.
func (s *Server) Snapshot(id string) (done func(), err error) {
	return s.transition(id, Running, Snapshotting)
}

// BeginDelete starts the deletion of a sandbox, as DELETE
// /sandboxes/{sandboxID} does (AgentENV's delete_sandbox: its VM is
// stopped, 3 s then SIGKILL, before its record goes): the sandbox is
// killing (listed as running without a state filter, not under
// state=running; a pause answers 404, as AgentENV's pause_sandbox does for
// a sandbox being killed) until done is called, and gone after.
func (s *Server) BeginDelete(id string) (done func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sbx[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("fakeagentenv: sandbox %s not found", id)
	case sb.State == Killing:
		return nil, fmt.Errorf("fakeagentenv: sandbox %s is being deleted already", id)
	}
	sb.State = Killing
	s.broadcastLocked()
	var once sync.Once
	return func() { once.Do(func() { s.Remove(id) }) }, nil
}

// Fork starts a fork of a running sandbox, as POST
// /sandboxes/{sandboxID}/fork does: the sandbox is forking (listed as
// paused, not under state=running; a pause answers 409) until done is
// called, and running again after.
func (s *Server) Fork(id string) (done func(), err error) {
	return s.transition(id, Running, Forking)
}

// transition moves sandbox id, which must be in state from, to the
// transitional state during until done is called, and to Running after.
func (s *Server) transition(id, from, during string) (done func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sbx[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("fakeagentenv: sandbox %s not found", id)
	case sb.State != from:
		return nil, fmt.Errorf("fakeagentenv: sandbox %s is %s, not %s", id, sb.State, from)
	}
	sb.State = during
	s.broadcastLocked()
	var once sync.Once
	return func() { once.Do(func() { s.setState(id, Running) }) }, nil
}

var errShuttingDown = errors.New("fakeagentenv: server is shutting down")

// States returns every sandbox's state by ID.
func (s *Server) States() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.sbx))
	for id, sb := range s.sbx {
		out[id] = sb.State
	}
	return out
}

// Stats are what a test asserts on.
type Stats struct {
	PauseRequests int // every POST .../pause that passed authentication
	Conflicts     int // 409 answers
	MaxInPause    int // most pauses running at once
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.pauses {
		n += c
	}
	return Stats{PauseRequests: n, Conflicts: s.conflicts, MaxInPause: s.maxPause}
}

// Handler serves the node API:
//
//	GET  /health                      204, no key needed
//	GET  /v2/sandboxes                ?state=running|paused &limit=N &nextToken=T; x-next-token
//	GET  /sandboxes                   running sandboxes, one page (deprecated)
//	POST /sandboxes                   {"memoryMB": N} -> 201 Sandbox; 503 while shutting down
//	POST /sandboxes/{sandboxID}/pause 204 paused (also already, or by the pause it joined);
//	                                  409 resuming, snapshotting, forking, or the joined pause failed
//	                                  or outlasted TransitionWait;
//	                                  404 unknown or being deleted; 500 on FailFirst, FailTerminal
//	POST /sandboxes/{sandboxID}/resume 204; 409 not paused; 503 while shutting down
//	DELETE /sandboxes/{sandboxID}     204; 404 unknown
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /v2/sandboxes", s.auth(s.listV2))
	mux.HandleFunc("GET /sandboxes", s.auth(s.listV1))
	mux.HandleFunc("POST /sandboxes", s.auth(s.create))
	mux.HandleFunc("POST /sandboxes/{sandboxID}/pause", s.auth(s.pause))
	mux.HandleFunc("POST /sandboxes/{sandboxID}/resume", s.auth(s.resume))
	mux.HandleFunc("DELETE /sandboxes/{sandboxID}", s.auth(func(w http.ResponseWriter, r *http.Request) {
		if id := r.PathValue("sandboxID"); !s.Remove(id) {
			apiError(w, http.StatusNotFound, "sandbox "+id+" not found")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	return mux
}

// SetAPIKey makes key the one every API request must carry from the next
// request on, as when the Secret the server reads its key from is rotated;
// empty: none is needed. Requests already past the check are served.
func (s *Server) SetAPIKey(key string) { s.apiKey.Store(&key) }

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := *s.apiKey.Load()
		if keys := r.Header.Values("X-API-Key"); key != "" && (len(keys) != 1 || keys[0] != key) {
			w.WriteHeader(http.StatusUnauthorized) // AgentENV's require_auth: the status alone
			return
		}
		h(w, r)
	}
}

func apiError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// sorted returns the sandboxes in listing order, newest first (startedAt
// descending, then ID ascending, as AgentENV's v2 listing), whose
// internal state is in states (every state when states is empty).
func (s *Server) sorted(states []string) []Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sortedLocked(states)
}

func (s *Server) sortedLocked(states []string) []Sandbox {
	var out []Sandbox
	for _, sb := range s.sbx {
		if len(states) == 0 || slices.Contains(states, sb.State) {
			out = append(out, *sb)
		}
	}
	slices.SortFunc(out, listingOrder)
	return out
}

// listing returns the sandboxes sorted, as sorted, for a listing, and
// makes the users of Config.ResumeWhenNoneRunning resume theirs once the
// listing has found none running: the listing does not show it, the
// requests after it do.
func (s *Server) listing(states []string) []Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sortedLocked(states)
	if n := s.cfg.ResumeWhenNoneRunning; n > 0 && !s.resumed && !s.shutdown {
		var paused []*Sandbox
		for _, sb := range s.sortedLocked(nil) {
			switch sb.State {
			case Paused:
				paused = append(paused, s.sbx[sb.SandboxID])
			case Running, Resuming:
				return out // still running: not the last listing
			}
		}
		if len(paused) > 0 {
			s.resumed = true
			for _, sb := range paused[:min(n, len(paused))] {
				s.resumeLocked(sb)
			}
		}
	}
	return out
}

func listingOrder(a, b Sandbox) int {
	return cmp.Or(b.StartedAt.Compare(a.StartedAt), cmp.Compare(a.SandboxID, b.SandboxID))
}

// listed returns the sandboxes as the API shows them: running or paused.
func listed(sbs []Sandbox) []Sandbox {
	out := make([]Sandbox, len(sbs))
	for i, sb := range sbs {
		sb.State = shown(sb.State)
		out[i] = sb
	}
	return out
}

func (s *Server) listV2(w http.ResponseWriter, r *http.Request) {
	if s.cfg.NoV2 {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	var states []string
	for _, v := range q["state"] {
		for st := range strings.SplitSeq(v, ",") {
			if st != Running && st != Paused {
				apiError(w, http.StatusBadRequest, "state must be running or paused, got "+strconv.Quote(st))
				return
			}
			states = append(states, st)
		}
	}
	if len(states) > 1 { // AgentENV: more than one state is no filter
		states = nil
	}
	limit := s.cfg.PageSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			apiError(w, http.StatusBadRequest, fmt.Sprintf("limit must be 1..%d, got %q", MaxPageSize, v))
			return
		}
		limit = n
	}
	all := s.listing(states)
	start := 0
	if tok := q.Get("nextToken"); tok != "" {
		// AgentENV's cursor (src/api/impls/pagination.rs): URL-safe base64,
		// padded, of "<startedAt RFC 3339, ns>__<sandboxID>", the last
		// sandbox of the previous page: the page goes on after it in listing
		// order, even if it has gone since.
		after, err := base64.URLEncoding.DecodeString(tok)
		if err != nil {
			apiError(w, http.StatusBadRequest, "invalid next token: "+err.Error())
			return
		}
		at, id, ok := strings.Cut(string(after), "__")
		t, err := time.Parse(time.RFC3339Nano, at)
		if !ok || err != nil {
			apiError(w, http.StatusBadRequest, "invalid next token: invalid cursor format")
			return
		}
		start, _ = slices.BinarySearchFunc(all, Sandbox{StartedAt: t, SandboxID: id}, listingOrder)
		if start < len(all) && all[start].SandboxID == id {
			start++
		}
	}
	end := min(start+limit, len(all))
	page := all[start:end]
	if end < len(all) {
		last := page[len(page)-1]
		tok := last.StartedAt.UTC().Format("2006-01-02T15:04:05.000000000Z") + "__" + last.SandboxID
		w.Header().Set(HeaderNextToken, base64.URLEncoding.EncodeToString([]byte(tok)))
	}
	writeJSON(w, http.StatusOK, listed(page))
}

func (s *Server) listV1(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, listed(s.listing([]string{Running})))
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		MemoryMB int `json:"memoryMB"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.MemoryMB < 0 {
		apiError(w, http.StatusBadRequest, "want {\"memoryMB\": N}")
		return
	}
	sb, err := s.Create(cmp.Or(req.MemoryMB, 512))
	if err != nil {
		apiError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, sb)
}

// pause runs one pause: running -> pausing (a compare-and-swap), the pause
// time, the durable record, paused. A client that gives up does not stop
// it: the server finishes what it began.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("sandboxID")
	d, code, msg := s.beginPause(id)
	if code == http.StatusNoContent {
		w.WriteHeader(code)
		return
	}
	if code != 0 {
		apiError(w, code, msg)
		return
	}
	time.Sleep(d)
	if err := s.finishPause(id); err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// beginPause moves the sandbox to pausing and returns how long its pause
// takes, or the answer when there is no pause to run, as AgentENV's
// pause_sandbox (src/orchestrator/service.rs) gives it: 204 when the
// sandbox is paused already, or when a pause in progress, which this
// request joins, ends paused; 409 when it is in another state (resuming,
// snapshotting), or a pause it joined failed (running again) or outlasted
// TransitionWait (still pausing: wait_for_transition's 60 s); 404 when it
// is gone; 500 for an injected failure.
func (s *Server) beginPause(id string) (time.Duration, int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sbx[id]
	if !ok {
		return 0, http.StatusNotFound, "sandbox " + id + " not found"
	}
	s.pauses[id]++
	if s.cfg.ConflictWhenPaused && (sb.State == Pausing || sb.State == Paused) {
		s.conflicts++
		return 0, http.StatusConflict, "sandbox cannot be paused from " + sb.State + " state"
	}
	if sb.State == Pausing { // joined: its outcome is this request's
		t := time.NewTimer(TransitionWait)
		defer t.Stop()
		st, left := s.waitWhileUntilLocked(id, Pausing, t.C)
		switch {
		case !left: // AgentENV's wait_for_transition gives up after 60 s
			s.conflicts++
			return 0, http.StatusConflict, "sandbox cannot be paused from " + Pausing + " state"
		case st == "" || st == Killing: // AgentENV's join_concurrent_pause: SandboxNotFound
			return 0, http.StatusNotFound, "sandbox " + id + " not found"
		case st == Paused:
			return 0, http.StatusNoContent, ""
		default: // the pause failed: running again
			s.conflicts++
			return 0, http.StatusConflict, "sandbox cannot be paused from " + Running + " state"
		}
	}
	switch sb.State {
	case Paused:
		return 0, http.StatusNoContent, ""
	case Killing: // AgentENV's pause_sandbox: "sandbox is being deleted while pausing"
		return 0, http.StatusNotFound, "sandbox " + id + " not found"
	case Running:
	default:
		s.conflicts++
		return 0, http.StatusConflict, "sandbox cannot be paused from " + sb.State + " state"
	}
	// FailTerminal's pause fails at its end (finishPause), and takes
	// precedence over FailFirst.
	if !nth(sb, s.cfg.FailTerminal) && nth(sb, s.cfg.FailFirst) && !s.failed[id] {
		s.failed[id] = true
		return 0, http.StatusInternalServerError, "snapshot failed (injected); retry"
	}
	sb.State = Pausing
	s.broadcastLocked()
	s.inPause++
	s.maxPause = max(s.maxPause, s.inPause)
	return s.cfg.PauseBase + time.Duration(sb.MemoryMB)*s.cfg.PausePerGiB/1024, 0, ""
}

// nth reports whether sb is one of every n-th sandbox by creation order
// (FailFirst, FailTerminal); never for n = 0.
func nth(sb *Sandbox, n int) bool {
	seq, _ := strconv.Atoi(sb.Metadata["n"])
	return n > 0 && seq%n == 0
}

// errTerminal is a pause's terminal failure (Config.FailTerminal).
var errTerminal = errors.New("operation Pause failed: snapshot failed (injected, terminal); sandbox removed")

func (s *Server) finishPause(id string) error {
	s.mu.Lock()
	p, ok := s.sbx[id]
	if !ok { // deleted while pausing
		s.inPause--
		s.mu.Unlock()
		return fmt.Errorf("sandbox %s not found", id)
	}
	if nth(p, s.cfg.FailTerminal) { // its first pause: the last, it is removed
		delete(s.sbx, id)
		s.inPause--
		s.broadcastLocked()
		s.mu.Unlock()
		return errTerminal
	}
	sb := *p
	s.mu.Unlock()
	sb.State = Paused
	err := s.writeRecord(sb)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inPause--
	defer s.broadcastLocked()
	if err != nil {
		p.State = Running // recoverable: resumed, retried later
		return err
	}
	p.State = Paused
	return nil
}

// writeRecord persists a paused sandbox durably: temp file, fsync, rename.
func (s *Server) writeRecord(sb Sandbox) error {
	if s.cfg.StateDir == "" {
		return nil
	}
	b, err := json.Marshal(sb)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.cfg.StateDir, ".rec-*")
	if err != nil {
		return err
	}
	if _, err = tmp.Write(b); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(s.cfg.StateDir, sb.SandboxID+".json"))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("sandboxID")
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sbx[id]
	switch {
	case s.shutdown:
		apiError(w, http.StatusServiceUnavailable, errShuttingDown.Error())
	case !ok, sb.State == Killing: // AgentENV's resume_sandbox: a sandbox being killed is not found
		apiError(w, http.StatusNotFound, "sandbox "+id+" not found")
	case sb.State != Paused:
		apiError(w, http.StatusConflict, "sandbox "+id+" is "+sb.State+", not paused")
	default:
		s.resumeLocked(sb)
		w.WriteHeader(http.StatusNoContent)
	}
}

// resumeLocked resumes a paused sandbox: running, its paused record gone.
// The caller holds s.mu.
func (s *Server) resumeLocked(sb *Sandbox) {
	sb.State = Running
	s.broadcastLocked()
	if s.cfg.StateDir != "" {
		_ = os.Remove(filepath.Join(s.cfg.StateDir, sb.SandboxID+".json"))
	}
}

// Shutdown is the orchestrator's shutdown as AgentENV runs it on SIGTERM
// (run_shutdown_cleanup): it turns creates and resumes away (503), then
// makes up to three passes, each over every sandbox not paused, in listing
// order, pausing a running one (one at a time) and waiting for one in a
// transitional state to leave it, TransitionWait at most (one still in it
// then is left as it is); it stops when a pass finds every sandbox paused.
// It returns how many it paused.
func (s *Server) Shutdown() int {
	s.mu.Lock()
	s.shutdown = true
	s.mu.Unlock()
	n := 0
	for range 3 {
		var left []Sandbox
		for _, sb := range s.sorted(nil) {
			if sb.State != Paused {
				left = append(left, sb)
			}
		}
		if len(left) == 0 {
			break
		}
		for _, sb := range left {
			if sb.State != Running { // transitional: waited for, 60 s at most
				t := time.NewTimer(TransitionWait)
				s.mu.Lock()
				s.waitWhileUntilLocked(sb.SandboxID, sb.State, t.C)
				s.mu.Unlock()
				t.Stop()
				continue
			}
			d, code, _ := s.beginPause(sb.SandboxID)
			if code != 0 {
				continue
			}
			time.Sleep(d)
			if s.finishPause(sb.SandboxID) == nil {
				n++
			}
		}
	}
	return n
}
