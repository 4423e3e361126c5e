//go:build linux

package main

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// The generic API shape (-api generic, the default: GET /sandboxes lists
// [{"id","state"}], POST /sandboxes/{id}/pause pauses one) through the
// supervisor's drain on a loopback server: the final sweep pauses what a
// user resumed after the preserve phase's last listing, and in force mode
// lists it and accounts for it, not started. The AgentENV shape has its
// own (settle_test.go, resume_e2e_test.go); the generic one's drain with
// the preStop hook and without it runs in e2e_test.go.

func TestGenericAPISweepPausesASandboxResumedAfterThePreservePhase(t *testing.T) {
	srv := newGenericServer(3)
	rep := drainGeneric(t, srv)

	states, pauses, resumed := srv.snapshot()
	require.NotEmpty(t, resumed)
	require.NotNil(t, rep.Preserve)
	assert.Len(t, rep.Preserve.Entries, 3)
	assert.Equal(t, 3, rep.Preserve.Counts[pause.Preserved], "the resumed one paused again by the sweep")
	assert.Zero(t, rep.Lost())
	assert.Equal(t, map[string]string{"s1": "paused", "s2": "paused", "s3": "paused"}, states)
	assert.Equal(t, 4, pauses, "3 in the preserve phase, the resumed one in the sweep")
	assert.Equal(t, drain.OK, rep.Phase(StepServer).Result, rep.Phase(StepServer).Error)
}

func TestGenericAPIForcedSweepAccountsForWhatItDoesNotPause(t *testing.T) {
	srv := newGenericServer(3)
	srv.onResume = func(sup *supervisor) { sup.drainer.Force() } // a second SIGTERM as the user resumes
	rep := drainGeneric(t, srv)

	states, pauses, resumed := srv.snapshot()
	require.NotEmpty(t, resumed)
	assert.True(t, rep.Forced)
	require.NotNil(t, rep.Preserve)
	assert.Len(t, rep.Preserve.Entries, 3)
	assert.Equal(t, 1, rep.Lost())
	e := entries(rep.Preserve)[resumed]
	assert.Equal(t, pause.NotStarted, e.Outcome)
	assert.Contains(t, e.Error, "force mode")
	assert.Equal(t, "running", states[resumed])
	assert.Equal(t, 3, pauses, "none sent in force mode")
	assert.Equal(t, drain.Failed, rep.Phase(StepServer).Result)
}

// A running sandbox the server lists without an ID cannot be paused: the
// preserve phase accounts for it once, failed (row 220), and preserves the
// others. The final sweep, which lists it again, neither counts it twice
// nor fails its step for it: it is not running again, it never stopped,
// and the preserve phase's account already has it.
func TestGenericAPISandboxWithoutAnIDIsLostOnceAndCostsNoOther(t *testing.T) {
	srv := newGenericServer(3)
	srv.unnamed = true
	rep := drainGeneric(t, srv)

	states, pauses, resumed := srv.snapshot()
	require.NotEmpty(t, resumed)
	require.NotNil(t, rep.Preserve)
	assert.Len(t, rep.Preserve.Entries, 4)
	assert.Equal(t, 3, rep.Preserve.Counts[pause.Preserved], "the resumed one paused again by the sweep")
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Failed], "the one without an ID")
	assert.Equal(t, 1, rep.Lost())
	assert.Equal(t, map[string]string{"s1": "paused", "s2": "paused", "s3": "paused"}, states)
	assert.Equal(t, 4, pauses)
	assert.Equal(t, drain.OK, rep.Phase(StepServer).Result, rep.Phase(StepServer).Error)
	require.Error(t, rep.Err())
}

// drainGeneric runs the supervisor's drain (-api generic, grace 10 s) in
// front of srv on a loopback server, up to the server's SIGTERM.
func drainGeneric(t *testing.T, srv *genericServer) *drain.Report {
	t.Helper()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	return drainBeforeSIGTERM(t, &http.Client{Transport: tr}, hooks{made: srv.setSupervisor},
		"-api", "generic", "-server-url", ts.URL, "-grace", "10s")
}

// A genericServer is a sandbox server with the generic API shape. At the
// first listing that finds sandboxes paused and none running, a user
// resumes one: that listing answers none running, every later one lists
// it running (as fakeagentenv's ResumeWhenNoneRunning).
type genericServer struct {
	mu       sync.Mutex
	order    []string
	states   map[string]string
	pauses   int
	resumed  string
	unnamed  bool              // every listing has a running sandbox without an ID too
	sup      *supervisor       // the supervisor draining it
	onResume func(*supervisor) // called as the user resumes
}

func newGenericServer(n int) *genericServer {
	s := &genericServer{states: map[string]string{}}
	for i := range n {
		id := "s" + string(rune('1'+i))
		s.order = append(s.order, id)
		s.states[id] = "running"
	}
	return s
}

func (s *genericServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", s.list)
	mux.HandleFunc("POST /sandboxes/{id}/pause", s.pause)
	mux.ServeHTTP(w, r)
}

func (s *genericServer) list(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	type item struct {
		ID    *string `json:"id"`
		State string  `json:"state"`
	}
	out := []item{}
	if s.unnamed {
		out = append(out, item{nil, "running"})
	}
	running := false
	for _, id := range s.order {
		out = append(out, item{&id, s.states[id]})
		running = running || s.states[id] == "running"
	}
	if !running && s.resumed == "" {
		s.resumed = s.order[len(s.order)-1]
		s.states[s.resumed] = "running" // after this listing's answer
		if s.onResume != nil {
			s.onResume(s.sup)
		}
	}
	_ = json.NewEncoder(w).Encode(out)
}

func (s *genericServer) pause(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.PathValue("id")
	if _, ok := s.states[id]; !ok {
		http.NotFound(w, r)
		return
	}
	s.pauses++
	s.states[id] = "paused"
	w.WriteHeader(http.StatusNoContent)
}

// setSupervisor gives onResume the supervisor.
func (s *genericServer) setSupervisor(sup *supervisor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sup = sup
}

// snapshot returns the sandboxes' states by ID, the pause requests
// answered and the sandbox resumed.
func (s *genericServer) snapshot() (states map[string]string, pauses int, resumed string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.states), s.pauses, s.resumed
}
