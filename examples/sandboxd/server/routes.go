package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
)

// sandboxView is a sandbox as the HTTP API shows it.
type sandboxView struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// routes is sandboxd's HTTP contract. Create and resume pass the admission gate (503 with
// Retry-After once draining, in JSON as every other answer); pause and delete are exempt:
// they move work off the node.
func (s *Server) routes() http.Handler {
	gate := s.drainer.Gate()
	mux := http.NewServeMux()
	mux.Handle("POST /sandboxes", bodyFirst(gate, inJSON(createRefusal, gate.Admit(drain.Create, http.HandlerFunc(s.create)))))
	mux.HandleFunc("GET /sandboxes", s.list)
	mux.Handle("POST /sandboxes/{id}/pause", gate.Admit(drain.Pause, http.HandlerFunc(s.pause)))
	mux.Handle("POST /sandboxes/{id}/resume", inJSON(s.resumeRefusal, gate.Admit(drain.Resume, http.HandlerFunc(s.resume))))
	mux.Handle("DELETE /sandboxes/{id}", gate.Admit(drain.Delete, http.HandlerFunc(s.delete)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, "ok") })
	mux.Handle("GET /readyz", gate.Readiness(http.HandlerFunc(s.ready)))
	mux.Handle("GET /metrics", s.metrics)
	return mux
}

// inJSON is in front of the gate's Admit, next: it answers the gate's refusal (503 with
// Retry-After; no handler of sandboxd's answers 503) in JSON, {"error": why}, as the
// rest of sandboxd's API answers, where the gate's plain text left a client that decodes
// the answer a decode error, not the refusal (docs/faults.md row 2301). refusal says
// why, and whether the connection is kept; it is asked only for a refusal, so that what
// it says is as the gate refused.
func inJSON(refusal func(r *http.Request) (why string, keep bool), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&refusalWriter{ResponseWriter: w, refusal: func() (string, bool) { return refusal(r) }}, r)
	})
}

// createRefusal is why the gate refused a create: the retry belongs on another node, on
// the new connection the gate's Connection: close makes.
func createRefusal(*http.Request) (string, bool) {
	return "sandboxd draining: create not started: not accepting new work: retry on another node after the Retry-After", false
}

// resumeRefusal is why the gate refused a resume while sandboxd drains. The gate's words
// send the retry to a node still ready, on a new connection; but a sandbox paused here
// (docs/faults.md row 2244, as row 1552 for the gVisor worker's Restore), or running
// here, which the drain pauses here (row 2302), or in transition here, which the drain
// waits for and leaves paused here (row 2460), has its record and image in this node's
// state directory (a hostPath), which no other node has, and a client that did as told
// found no such sandbox there (404), as if it were gone. That refusal, still counted by
// the gate, says to resume it here once sandboxd serves again, and keeps the
// connection. A resume of any other sandbox (none here, or one deleted, died or lost)
// keeps the gate's advice, to retry on another node.
func (s *Server) resumeRefusal(r *http.Request) (string, bool) {
	id := r.PathValue("id")
	const here = "which no other node has: resume it here once sandboxd serves again"
	switch state := s.stateHere(id); state {
	case sandbox.Paused:
		return fmt.Sprintf("sandboxd draining: resume of %s not started: its record and image are in this node's state directory, "+here, id), true
	case sandbox.Running:
		return fmt.Sprintf("sandboxd draining: resume of %s not started: it is running here, and the drain pauses it here: "+
			"its record and image will be in this node's state directory, "+here, id), true
	case sandbox.Creating, sandbox.Pausing, sandbox.Resuming:
		return fmt.Sprintf("sandboxd draining: resume of %s not started: it is %s here, and the drain leaves it paused here: "+
			"its record and image will be in this node's state directory, "+here, id, inTransition[state]), true
	}
	return fmt.Sprintf("sandboxd draining: resume of %s not started: not accepting new work: retry on another node after the Retry-After", id), false
}

// inTransition says what a request in flight does to a sandbox in a state of
// sandbox.InTransition.
var inTransition = map[string]string{
	sandbox.Creating: "being created",
	sandbox.Pausing:  "being paused",
	sandbox.Resuming: "being resumed",
}

// stateHere is the state of sandbox id on the node, or "" when it has none.
func (s *Server) stateHere(id string) string {
	for _, info := range s.node.List() {
		if info.ID == id {
			return info.State
		}
	}
	return ""
}

// refusalWriter answers the gate's refusal in JSON, saying what refusal says; any other
// answer goes out as it is.
type refusalWriter struct {
	http.ResponseWriter
	refusal func() (why string, keep bool)
	refused bool // the gate's refusal: its body is replaced
}

func (w *refusalWriter) WriteHeader(code int) {
	if code != http.StatusServiceUnavailable || w.refused {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.refused = true
	why, keep := w.refusal()
	if keep {
		w.Header().Del("Connection") // a new connection would go to another node
	}
	w.Header().Del("X-Content-Type-Options")
	writeError(w.ResponseWriter, code, errors.New(why))
}

func (w *refusalWriter) Write(p []byte) (int, error) {
	if w.refused {
		return len(p), nil // the gate's words, replaced
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap is for http.NewResponseController, whose deadlines and Flush are the
// connection's.
func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hookRoutes is the preStop hook, served on its own listener and guarded: only a request
// with the hook secret (or, without one, from loopback) may start a drain; every other
// one is refused 403 and logged.
func (s *Server) hookRoutes() http.Handler {
	guard := &drain.HookGuard{Secret: s.cfg.HookSecret, Logger: s.logger}
	mux := http.NewServeMux()
	mux.Handle("GET /drain", guard.Wrap(s.drainer.PreStop()))
	return mux
}

// timeoutKey is the request context's key of a create's timeout_s, which bodyFirst read.
type timeoutKey struct{}

// bodyFirst reads and checks a create's body before the gate, next, admits the create:
// admitted with its headers, a create whose client sent its body slowly held the gate
// phase waiting (3 s for a body sent 3 s after the SIGTERM), and one whose body came
// after the gate phase's deadline made its sandbox after the preserve phase's listing,
// answered 201 "running" of a sandbox that was never preserved and in no Report
// (docs/faults.md row 1242). Read first, the create is admitted when its work begins,
// or refused 503 once the gate has closed. The body is at most 1 KiB; its read ends with
// the client, or as the gate closes (readUntilClosed): the gate then refuses the create
// whatever its body, and a client whose upload stalled held the server's HTTP step,
// which failed, and had no answer (row 2243).
func bodyFirst(gate *drain.Gate, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		timeoutS, err := readUntilClosed(gate, w, func() (int, error) { return createBody(http.MaxBytesReader(w, r.Body, 1<<10)) })
		if err != nil && !gate.Closed() {
			writeError(w, http.StatusBadRequest, fmt.Errorf(`body must be {"timeout_s": N} with N in [1, %d]: %w`, sandbox.MaxTimeoutS, err))
			return
		}
		// Once the gate is closed next refuses the create (503, Retry-After, counted), its
		// body read or not.
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), timeoutKey{}, timeoutS)))
	})
}

// readUntilClosed runs read, which reads the request's body, and ends a read that waits
// for the client as the gate closes: the body's read deadline is set then (a Body.Read
// does not watch the request's context). Set once the gate is closed, it cuts nothing
// the create needs, which the gate refuses; the refusal closes the connection.
func readUntilClosed(gate *drain.Gate, w http.ResponseWriter, read func() (int, error)) (int, error) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-gate.Draining():
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		case <-done:
		}
	})
	defer wg.Wait()
	defer close(done)
	return read()
}

// create makes a sandbox of the timeout_s bodyFirst read.
func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	info, err := s.node.Create(r.Context(), r.Context().Value(timeoutKey{}).(int))
	if err != nil {
		writeError(w, status(err), err)
		return
	}
	writeJSON(w, http.StatusCreated, sandboxView{info.ID, info.State})
}

func (s *Server) list(w http.ResponseWriter, _ *http.Request) {
	views := []sandboxView{}
	for _, info := range s.node.List() {
		views = append(views, sandboxView{info.ID, info.State})
	}
	writeJSON(w, http.StatusOK, views)
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	info, err := s.node.Pause(r.Context(), r.PathValue("id"))
	s.transition(w, info, err)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	info, err := s.node.Resume(r.Context(), r.PathValue("id"))
	s.transition(w, info, err)
}

func (s *Server) transition(w http.ResponseWriter, info sandbox.Info, err error) {
	if err != nil {
		writeError(w, status(err), err)
		return
	}
	writeJSON(w, http.StatusOK, sandboxView{info.ID, info.State})
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	if err := s.node.Delete(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, status(err), err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func status(err error) int {
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, sandbox.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, sandbox.ErrDied): // not running, and no retry will make it: a client's error to see, not a server's
		return http.StatusConflict
	case errors.Is(err, sandbox.ErrLost): // stopped by its failed pause, its state gone: no retry brings it back (the body says lost)
		return http.StatusConflict
	default:
		return http.StatusInternalServerError
	}
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// createBody decodes a create body strictly: exactly one object with exactly one field,
// "timeout_s" spelt exactly so (encoding/json would match "TIMEOUT_S" too), holding an
// integer in [1, sandbox.MaxTimeoutS], and nothing after the object but white space.
func createBody(r io.Reader) (int, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, errors.New("not a JSON object")
	}
	var timeoutS int64
	seen := false
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return 0, err
		}
		if key != "timeout_s" || seen {
			return 0, fmt.Errorf("unexpected field %q", key)
		}
		seen = true
		tok, err := dec.Token()
		if err != nil {
			return 0, err
		}
		n, ok := tok.(json.Number)
		if !ok {
			return 0, errors.New("timeout_s is not a number")
		}
		if timeoutS, err = n.Int64(); err != nil {
			return 0, fmt.Errorf("timeout_s %s is not a whole number in range", n)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return 0, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return 0, errors.New("data after the JSON object")
	}
	if !seen || timeoutS < 1 || timeoutS > sandbox.MaxTimeoutS {
		return 0, fmt.Errorf("timeout_s %d is out of range", timeoutS)
	}
	return int(timeoutS), nil
}
