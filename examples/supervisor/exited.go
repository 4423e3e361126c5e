//go:build linux

package main

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/drainkit/drainkit/pause"
)

// A server that exits on its own during a drain (a crash, or its own
// shutdown on a signal someone else sent) takes with it every sandbox it
// had not paused: only paused records persist. Nothing can list them any
// more, so what the supervisor knows is the last listing that succeeded:
// the sandboxes it showed that the drain's account does not already hold
// (no entry: the preserve phase had not listed, or never could) are
// counted lost, in the Report (LostWithServer), its note, the log and the
// exit status. The server's own shutdown may have paused some of them; the
// supervisor cannot tell, and a sandbox not known preserved is counted
// lost.

// recorder is a lister of the server's sandboxes that keeps the IDs of its
// last listing that succeeded.
type recorder struct {
	list pause.Lister
	ids  func(context.Context) ([]string, error) // the same listing, IDs only

	mu   sync.Mutex
	last []string
}

// List implements pause.Lister and records the IDs listed.
func (r *recorder) List(ctx context.Context) ([]pause.Sandbox, error) {
	sbs, err := r.list.List(ctx)
	if err == nil {
		ids := make([]string, len(sbs))
		for i, sb := range sbs {
			ids[i] = sb.ID()
		}
		r.record(ids)
	}
	return sbs, err
}

// RunningIDs lists the IDs only (a readiness probe) and records them.
func (r *recorder) RunningIDs(ctx context.Context) ([]string, error) {
	ids, err := r.ids(ctx)
	if err == nil {
		r.record(slices.Clone(ids))
	}
	return ids, err
}

func (r *recorder) record(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = ids
}

// lastListed returns the IDs of the last listing that succeeded.
func (r *recorder) lastListed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.last)
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

// serverExitNote is the Report's note for sandboxes lost with a server that
// exited on its own during the drain.
func serverExitNote(status string, lost []string) string {
	const most = 10
	shown := lost[:min(len(lost), most)]
	more := ""
	if len(lost) > most {
		more = fmt.Sprintf(" and %d more", len(lost)-most)
	}
	return fmt.Sprintf("the server exited on its own during the drain (%s): %d sandbox(es) its last listing showed not paused, not known preserved: %v%s",
		status, len(lost), shown, more)
}
