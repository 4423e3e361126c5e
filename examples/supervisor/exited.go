//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/termmsg"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// A server that exits on its own before its SIGTERM, during a drain or
// before any termination (a crash, or its own shutdown on a signal someone
// else sent), takes with it every sandbox it had not paused: only paused
// records persist. Nothing can list them any more, so what the supervisor
// knows is the last listing that succeeded (before any termination, a
// readiness probe's; one that failed after its first page counts with
// what it listed, and the note says it was INCOMPLETE: recorder): the
// sandboxes it showed that the drain's account
// does not already hold (no drain, or no entry: the preserve phase had not
// listed, or never could) are counted lost, in the Report
// (LostWithServer), its note, the log, the termination message's first
// line and the exit status; and in drain's account too, which the server
// step gives them when it runs after the exit (lostBeforeSIGTERM), so that
// drain's log line and DrainFinished count them, or in a DrainFinished of
// the supervisor's own when the exit came during the drain before SIGTERM
// (eventServerExited; before any termination no drain began). The server's
// own shutdown may have paused some of them; the supervisor cannot tell,
// and a sandbox not known preserved is counted lost.

// recorder is a lister of the server's sandboxes that keeps the IDs of its
// last listing, in last, which recorders of other listings of the same
// server may share. A listing that failed after its first page (a page
// 2's 503: a pause.Lister's partial listing) is kept too, with the last
// one's IDs it did not list, as drain's count keeps one: the sandboxes it
// listed run, and of the others it says only that it did not reach them.
type recorder struct {
	list pause.Lister
	last *lastListing // nil: kept nowhere
}

// lastListing is the IDs of the last listing that listed any, and its
// error when it was incomplete ("": complete).
type lastListing struct {
	mu         sync.Mutex
	ids        []string
	incomplete string
}

// List implements pause.Lister and records the IDs listed. In front of
// AgentENV (notPaused), a sandbox the unfiltered listing shows paused that
// an incomplete listing of the paused ones did not reach is listed, as
// notPaused lists it (drain's count is never fewer than it knows run), and
// recorded as not reached: it is paused, most likely, and what the last
// listing said of it stands. A listing a readiness probe's end cut
// (errProbeGaveUp) is not recorded: it says nothing of the server, and
// recorded INCOMPLETE, its error "context canceled" became the note of a
// server that then exited on its own (docs/faults.md row 2162).
func (r *recorder) List(ctx context.Context) ([]pause.Sandbox, error) {
	var sbs []pause.Sandbox
	var unreached map[string]bool
	var err error
	if np, ok := r.list.(*notPaused); ok {
		sbs, unreached, err = np.list(ctx)
	} else {
		sbs, err = r.list.List(ctx)
	}
	if (err == nil || len(sbs) > 0) && !errors.Is(context.Cause(ctx), errProbeGaveUp) {
		ids := slices.DeleteFunc(sandboxIDs(sbs), func(id string) bool { return unreached[id] })
		r.record(ids, err)
	}
	return sbs, err
}

// RunningIDs lists as List does, recording what it lists, and returns the
// IDs (a readiness probe). A listing that failed after its first page is a
// failure here (readiness fails), recorded as List records it.
func (r *recorder) RunningIDs(ctx context.Context) ([]string, error) {
	sbs, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	return sandboxIDs(sbs), nil
}

// record records ids, the IDs of a listing whose error is err: an
// incomplete one's keeps the last listing's IDs it does not have.
func (r *recorder) record(ids []string, err error) {
	if r.last == nil {
		return
	}
	r.last.mu.Lock()
	defer r.last.mu.Unlock()
	if err == nil {
		r.last.ids, r.last.incomplete = ids, ""
		return
	}
	listed := make(map[string]bool, len(ids))
	for _, id := range ids {
		listed[id] = true
	}
	for _, id := range r.last.ids {
		if !listed[id] {
			ids = append(ids, id)
		}
	}
	r.last.ids, r.last.incomplete = ids, err.Error()
}

// lastListed returns the IDs of the last listing, and its error when it
// was incomplete ("": complete); see recorder.
func (r *recorder) lastListed() ([]string, string) {
	r.last.mu.Lock()
	defer r.last.mu.Unlock()
	return slices.Clone(r.last.ids), r.last.incomplete
}

// lostWithServer returns the sandboxes the last listing showed for which
// the account rep (nil: none) has no entry. rep's entries, lost or not,
// are its own account; an Unknown rep has none.
func lostWithServer(last []string, rep *pause.Report) []string {
	accounted := map[string]bool{}
	if rep != nil {
		for _, e := range rep.Entries {
			accounted[e.ID] = true
		}
	}
	var out []string
	for _, id := range last {
		if !accounted[id] {
			out = append(out, id)
		}
	}
	return out
}

// errLostWithServer is the error of a sandbox's entry in the server step's
// account when the server exited on its own before that step's SIGTERM.
const errLostWithServer = "lost with the server: it exited on its own during the drain; its last listing showed this sandbox not paused and no preserve accounted for it"

// lostBeforeSIGTERM is what the server step accounts for when the server
// exited on its own before its SIGTERM: the sandboxes its last listing
// showed that neither a Run of the preserve phase nor the final sweep's
// account swept (nil: none) has an entry for, each not started, lost,
// added to swept (a new account when nil), so that drain merges them into
// Report.Preserve before it logs the Report and posts DrainFinished; and an
// error naming them. swept comes back as it is while the server runs.
func (s *supervisor) lostBeforeSIGTERM(swept *pause.Report) (*pause.Report, error) {
	select {
	case <-s.server.done:
	default:
		return swept, nil
	}
	s.exitedDuring.Store(true) // before supervise's loop may see it
	var lost []string
	last, incomplete := s.counted.lastListed()
	for _, id := range lostWithServer(last, swept) {
		if !s.preserver.hasEntry(id) {
			lost = append(lost, id)
		}
	}
	if len(lost) == 0 {
		return swept, nil
	}
	if swept == nil {
		now := time.Now()
		swept = &pause.Report{Start: now, Deadline: now, End: now}
	}
	counts := map[pause.Outcome]int{}
	for _, id := range lost {
		swept.Entries = append(swept.Entries, pause.Entry{ID: id, Outcome: pause.NotStarted, End: swept.End, Error: errLostWithServer})
	}
	for _, e := range swept.Entries {
		counts[e.Outcome]++
	}
	swept.Counts = counts
	return swept, errors.New(serverExitNote(duringTheDrain, s.server.state().String(), lost, incomplete))
}

// lostByServerStep returns the sandboxes of the account rep (nil: none)
// that the server step counted lost with the server (lostBeforeSIGTERM).
func lostByServerStep(rep *pause.Report) []string {
	if rep == nil {
		return nil
	}
	var out []string
	for _, e := range rep.Entries {
		if e.Error == errLostWithServer {
			out = append(out, e.ID)
		}
	}
	return out
}

// eventServerExited posts, for a server that exited on its own (rep has no
// drain account), the Events that say so on the pod: failed, the daemon
// step's StepFailed when its teardown failed (daemonStepFailedEvent), then
// the exit's. During a drain that is DrainFinished, a Warning: drain posted
// DrainStarted at the preStop call, and its Shutdown, which posts
// DrainFinished, never ran. Before any termination, with sandboxes lost
// with it, it is SandboxesLost, a Warning, as drain posts for a drain's
// losses: no drain ran, and the pod's Events were the one place `kubectl
// describe` would not say it. The note counts the sandboxes lost with the
// server and gives the exit status, as the Report does, then the daemon's
// teardown's line (termmsg.UblkLine) and the Report's note. The wait for
// the events is bounded as drain bounds its own: 1 s, and once a
// termination began never more than half the time left before SIGKILL.
//
// Which the exit was is the Report's (exitedWhen), not whether the budget
// is anchored when the Event is posted: a SIGTERM during the daemon's
// teardown after a server that exited before any termination anchors it,
// and the Event said "during the drain, before SIGTERM", a DrainFinished of
// a drain that never began, where the Report's note said "before
// termination" (docs/faults.md row 1052).
//
// A teardown that failed is posted whatever was lost: before, with no
// sandbox lost no Event was posted, and the exit's said nothing of the
// devices, so a device left live, the one the host may crash on, was in
// no Event (docs/faults.md row 2641).
func (s *supervisor) eventServerExited(rep *Report, failed *kube.Event) {
	if s.pod == nil || rep.Drain != nil {
		return
	}
	wait := time.Second
	if s.budget.Anchored() { // a termination began: SIGKILL comes
		wait = max(min(wait, time.Until(s.budget.Kill())/2), 0)
	}
	var evs []kube.Event
	if failed != nil {
		evs = append(evs, *failed)
	}
	if ev, ok := s.serverExitedEvent(rep); ok {
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		return
	}
	for _, ev := range evs {
		s.pod.Record(ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if st := s.pod.Flush(ctx); st.Dropped > 0 {
		s.log.Warn("supervisor: Kubernetes Events dropped", "posted", st.Posted, "dropped", st.Dropped, "last_error", st.LastError)
	}
}

// serverExitedEvent is the Event of a server that exited on its own (see
// eventServerExited); false when there is none to post: no sandbox lost
// before any termination.
func (s *supervisor) serverExitedEvent(rep *Report) (kube.Event, bool) {
	var ev kube.Event
	switch {
	case s.exitedWhen() == duringTheDrain:
		ev = kube.Event{Type: kube.Warning, Reason: "DrainFinished", Action: "Drain", Note: fmt.Sprintf(
			"the server exited on its own during the drain, before SIGTERM (%s): %d sandboxes lost with it; supervisor exit code %d",
			rep.Server.String(), rep.Lost(), rep.ExitCode)}
	case rep.Lost() > 0:
		ev = kube.Event{Type: kube.Warning, Reason: "SandboxesLost", Action: "Drain", Note: fmt.Sprintf(
			"the server exited on its own before termination (%s), no drain ran: %d sandboxes lost with it; supervisor exit code %d",
			rep.Server.String(), rep.Lost(), rep.ExitCode)}
	default:
		return kube.Event{}, false
	}
	if line := termmsg.UblkLine(rep.Ublk); line != "" { // bounded, before the note, which is not
		ev.Note += "\n" + line
	}
	if rep.Note != "" {
		ev.Note += "\n" + rep.Note
	}
	return ev, true
}

// daemonStepFailedEvent is the StepFailed Event of the daemon step that
// ended with result and the error msg after the server exited on its own,
// outside any drain: a Warning saying the step, its result, its duration
// and its error, then the teardown's account, as drain posts it for a
// step of a drain that did not end ok. teardown may be nil (no account).
func daemonStepFailedEvent(teardown *ublk.Report, result drain.Result, msg string) *kube.Event {
	var took time.Duration
	if teardown != nil {
		took = teardown.Duration
	}
	note := fmt.Sprintf("step %s: %s in %v: %s", StepDaemon, result, took.Round(time.Millisecond), msg)
	if teardown != nil {
		note += "\n" + strings.TrimSpace(teardown.String())
	}
	return &kube.Event{Type: kube.Warning, Reason: "StepFailed", Action: StepDaemon, Note: note}
}

// When the server exited on its own, in serverExitNote.
const (
	duringTheDrain    = "during the drain"
	beforeTermination = "before termination"
)

// exitedWhen returns when the server exited on its own: before any
// termination, or during the drain.
func (s *supervisor) exitedWhen() string {
	if s.exitedBefore.Load() {
		return beforeTermination
	}
	return duringTheDrain
}

// serverExitNote is the Report's note for sandboxes lost with a server that
// exited on its own when (duringTheDrain or beforeTermination), its last
// listing incomplete with that error ("": complete).
func serverExitNote(when, status string, lost []string, incomplete string) string {
	const most = 10
	shown := lost[:min(len(lost), most)]
	more := ""
	if len(lost) > most {
		more = fmt.Sprintf(" and %d more", len(lost)-most)
	}
	msg := fmt.Sprintf("the server exited on its own %s (%s): %d sandbox(es) its last listing showed not paused, not known preserved: %v%s",
		when, status, len(lost), shown, more)
	if incomplete != "" {
		msg += "; that listing was INCOMPLETE, sandboxes it did not reach may have been lost too: " + incomplete
	}
	return msg
}
