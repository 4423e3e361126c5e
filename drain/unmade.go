package drain

import (
	"log/slog"
	"net/http"
	"time"
)

// What the methods of a Drainer or Server not made by New or NewServer (a
// zero value, or a nil pointer) say instead of dereferencing what New
// would have made: a process at SIGTERM that panics loses every sandbox.
const (
	notMadeDrainer = "drain: Drainer not made by drain.New"
	notMadeServer  = "drain: Server not made by drain.NewServer"
)

// made reports whether d was made by New.
func (d *Drainer) made() bool { return d != nil && d.done != nil }

// made reports whether s was made by NewServer.
func (s *Server) made() bool { return s != nil && s.d != nil }

// notMadeReport is the Report of a Drainer not made by New, logged at
// Error through slog.Default (such a Drainer has no Logger): nothing was
// drained, and its preserve phase failed saying why, so Err says so and
// the caller's exit status is not 0.
func notMadeReport() *Report {
	now := time.Now()
	const why = notMadeDrainer + ": nothing was drained, no sandbox was preserved"
	slog.Default().Error(why)
	return &Report{Start: now, End: now, Phases: []PhaseReport{{Name: PhasePreserve, Start: now, End: now, Result: Failed, Error: why}}}
}

// notMadeHandler answers every request 500 with what, logged at Error
// through slog.Default.
func notMadeHandler(what string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slog.Default().Error(what, "method", r.Method, "path", r.URL.Path)
		http.Error(w, what, http.StatusInternalServerError)
	})
}

// closedChan returns a closed channel.
func closedChan() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
