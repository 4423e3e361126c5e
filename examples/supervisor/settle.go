//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/drainkit/drainkit/internal/listedstate"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/httpsource"
)

// Sandboxes in transition. AgentENV's API shows a sandbox's state as
// running or paused only (src/api/impls/sandbox.rs): pausing, paused,
// snapshotting and forking show as paused; creating, resuming, running and
// killing as running. A snapshot and a fork return the sandbox to running
// once they end, and only a paused record survives the process: a sandbox
// snapshotted or forked through the whole preserve phase is listed paused
// at every pass, gets no pause and no entry in the Report, and runs again
// afterwards, until the server step's SIGKILL takes it. GET
// /v2/sandboxes?state=paused filters on the exact state (paused alone), so
// the sandboxes the unfiltered listing shows and that one does not are the
// ones not paused: running, or in a transition. The final sweep pauses
// those: a pause of one being paused joins that pause (204 once it is
// paused), one being snapshotted, forked, created or resumed answers 409,
// retried until it runs again and is paused, or until the sweep's time is
// up, when it is Failed with the 409 that names its state: lost, in the
// Report, the log and the exit status.
//
// A pause the sweep gives up on (in flight at three quarters of the server
// step) goes on in AgentENV, which finishes what it began whether or not
// the client waits, and whose own shutdown waits for a sandbox being
// paused. The sweep keeps listing those while AgentENV shows them paused
// (being paused, or paused), until seven eighths of the step: one listed
// paused (state=paused) is preserved, its entry's error saying it finished
// late; one listed running again (its pause failed) or gone is left lost.
// AgentENV stops accepting connections at its SIGTERM, so this is the last
// time anything can list them.

// notPaused lists every sandbox the server has not paused: the ones its
// unfiltered listing shows less the ones its state=paused listing shows.
// Their pauses go through src, the supervisor's Source (its limiter, and
// what it knows of failed pauses).
type notPaused struct {
	src    *httpsource.Source
	all    *httpsource.Source // the list path, every sandbox listed
	shown  *httpsource.Source // the list path, the ones shown paused (paused or in a transition)
	paused *httpsource.Source // the list path with state=paused
}

// newNotPaused returns the lister of the sandboxes not paused for the API
// configuration c (AgentENV's).
func newNotPaused(src *httpsource.Source, baseURL string, c httpsource.Config) (*notPaused, error) {
	all := c
	all.NoStateField = true // every sandbox listed
	shown := c
	shown.RunningStates = []string{"paused"}
	paused := c
	paused.ListPath = withQuery(c.ListPath, "state=paused")
	paused.FallbackListPath = "" // the deprecated list has no filter
	paused.RunningStates = []string{"paused"}
	l := &notPaused{src: src}
	var err error
	if l.all, err = httpsource.New(baseURL, all); err != nil {
		return nil, err
	}
	if l.shown, err = httpsource.New(baseURL, shown); err != nil {
		return nil, err
	}
	if l.paused, err = httpsource.New(baseURL, paused); err != nil {
		return nil, err
	}
	return l, nil
}

// withQuery adds the query parameter kv to path.
func withQuery(path, kv string) string {
	if strings.Contains(path, "?") {
		return path + "&" + kv
	}
	return path + "?" + kv
}

// List implements pause.Lister: the sandboxes listed, less the ones listed
// paused. The paused ones are listed last: a sandbox that finishes its
// pause between the two listings is left out, one resumed between them is
// in. A server without the filtered listing (a 404: only the deprecated
// GET /sandboxes) cannot tell a paused sandbox from one in transition: the
// running ones are listed, as in the preserve phase. Each has the size
// the listing gave it (pause.Sized); its pause goes through src.
//
// A listing that fails after its first page (AgentENV answering a
// nextToken page 503) gives the pages that answered with its error, as
// httpsource's List does, and List returns what they list with that
// error, as a pause.Lister does: the sweep pauses them, and its account
// says the listing was incomplete. When the listing of the paused ones is
// the incomplete one, a sandbox it did not reach that the unfiltered
// listing shows paused is taken for one in transition: a pause of one
// already paused answers 204 (or 409 "paused", gone), costing a request,
// where leaving out one that runs again would lose it (an account that
// sends no pause lists known instead). When the listing of the paused
// ones fails at its first page, the ones the unfiltered listing shows
// running are listed, with the error, and none shown paused: a pause for
// every paused sandbox of the node is no request's cost. So are they when
// the unfiltered listing was answered 429, or 503 with a Retry-After: the
// listing of the paused ones is not sent before the time it names, and
// the error's RetryAt says when to list again (listPaused).
func (l *notPaused) List(ctx context.Context) ([]pause.Sandbox, error) {
	sbs, _, err := l.list(ctx)
	return sbs, err
}

// known lists as List does, less the sandboxes whose state it does not
// know: the ones the unfiltered listing shows paused that an incomplete
// listing of the paused ones did not reach (paused, most of them, or in a
// transition). The final sweep in force mode, which sends no pause,
// counts what it lists lost, not started: such a sandbox, paused, would be
// counted lost with it. Its error says the listing was incomplete, and so
// does the account.
func (l *notPaused) known(ctx context.Context) ([]pause.Sandbox, error) {
	sbs, unreached, err := l.list(ctx)
	return slices.DeleteFunc(sbs, func(sb pause.Sandbox) bool { return unreached[sb.ID()] }), err
}

// list is List's listing, with the IDs of the sandboxes the unfiltered
// listing shows paused that an incomplete listing of the paused ones did
// not reach (see known). Two listings, one after the other: the unfiltered
// one, whose elements' states say which sandboxes it shows paused
// (shownPaused: they mark the ones in transition, for their pauses,
// inTransition, and tell the running ones when the listing of the paused
// ones failed), then state=paused. A third, the unfiltered one again for
// the ones shown paused, would not fit /readyz's 2 s with an AgentENV
// whose listing takes 0.7 s (docs/faults.md rows 1183, 1371).
func (l *notPaused) list(ctx context.Context) (sbs []pause.Sandbox, unreached map[string]bool, listErr error) {
	listed, listErr := l.all.List(ctx)
	if len(listed) == 0 {
		return nil, nil, listErr
	}
	pausedSbs, pausedErr := l.listPaused(ctx, listErr)
	var se *httpsource.StatusError
	// none: the listing of the paused ones reached none (its first page
	// failed); the ones the unfiltered listing shows running are known not
	// paused all the same, and only they are listed: taking every one it
	// shows paused for one in a transition would send a pause for every
	// paused sandbox of the node.
	none := len(pausedSbs) == 0 && pausedErr != nil
	switch {
	case none && errors.As(pausedErr, &se) && se.StatusCode == http.StatusNotFound:
		sbs, err := l.src.List(ctx)
		return sbs, nil, err
	case pausedErr != nil:
		listErr = alsoFailed(listErr, fmt.Errorf("listing the paused sandboxes: %w", pausedErr))
	}
	isPaused := idSet(sandboxIDs(pausedSbs))
	out := make([]pause.Sandbox, 0, len(listed))
	unreached = map[string]bool{}
	for _, sb := range listed {
		shown := shownPaused(sb)
		if isPaused[sb.ID()] || none && shown {
			continue
		}
		var b pause.Sandbox = l.src.Sandbox(sb.ID())
		if shown {
			b = inTransition{b}
			if pausedErr != nil {
				unreached[sb.ID()] = true
			}
		}
		if sz, ok := sb.(pause.Sized); ok {
			b = &sizedSandbox{Sandbox: b, size: sz.Size()}
		}
		out = append(out, b)
	}
	return out, unreached, listErr
}

// listPaused lists the paused sandboxes (state=paused), unless listErr,
// the error of the unfiltered listing just made, asks for no request
// before a time still to come (a pause.Lister's RetryAt: a page answered
// 429, or 503 with a Retry-After, by a proxy in front of AgentENV, which
// sends neither itself). Then the request is not sent, and its error says
// so, as one whose first page failed: the listing gives the sandboxes
// shown running, and is made again at that time (pause.Lister). Sent at
// once, it asked again, milliseconds after the answer, a server that had
// said when to ask (docs/faults.md row 1980).
func (l *notPaused) listPaused(ctx context.Context, listErr error) ([]pause.Sandbox, error) {
	var ra interface{ RetryAt() time.Time }
	if errors.As(listErr, &ra) && time.Now().Before(ra.RetryAt()) {
		return nil, fmt.Errorf("not sent: the server asked for no listing before %s", ra.RetryAt().Format(time.RFC3339Nano))
	}
	return l.paused.List(ctx)
}

// shownPaused reports whether the unfiltered listing showed sb paused
// (paused, or in a transition AgentENV shows so), by the state its element
// gave (listedstate.Of): one with no state counts shown paused, as a
// listing filtering on "paused" lists it. Read from the listing of every
// sandbox, it takes no listing of its own: fetched again for it, the
// final sweep's listing was three requests, one after the other, where
// two say the same (docs/faults.md row 1371).
func shownPaused(sb pause.Sandbox) bool {
	state, ok := listedstate.Of(sb)
	return !ok || strings.EqualFold(state, "paused")
}

// alsoFailed is err, a listing's failure, after first's (nil: none), on
// one line: a Report's ListErr and the note carry it.
func alsoFailed(first, err error) error {
	if first == nil {
		return err
	}
	return fmt.Errorf("%w; %w", first, err)
}

// sandboxIDs returns the IDs of sbs.
func sandboxIDs(sbs []pause.Sandbox) []string {
	out := make([]string, len(sbs))
	for i, sb := range sbs {
		out[i] = sb.ID()
	}
	return out
}

// idSet is the set of ids; one listed without an ID ("") is no other
// sandbox, and is not in it.
func idSet(ids []string) map[string]bool {
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = id != ""
	}
	return set
}

// An inTransition is a sandbox AgentENV showed paused but did not list
// paused: being paused, snapshotted or forked. A pause of one being paused
// joins that pause (someone else's: its user's, its timeout's), and
// AgentENV answers the joined request 404 when that pause fails terminally
// and removes the sandbox (src/orchestrator/service.rs,
// join_concurrent_pause), the answer a deleted sandbox gets: pause.ErrGone,
// Vanished, though the sandbox and its state are gone. Such a one answered
// gone is lost: its error names both causes, since the answer cannot tell
// them apart. A 409 naming the state paused is still gone (paused by
// someone else).
type inTransition struct{ pause.Sandbox }

// Preserve implements pause.Sandbox.
func (b inTransition) Preserve(ctx context.Context) error {
	err := b.Sandbox.Preserve(ctx)
	var se *httpsource.StatusError
	if errors.Is(err, pause.ErrGone) && errors.As(err, &se) && se.StatusCode != http.StatusConflict {
		return backoff.Permanent(fmt.Errorf("pause %s: gone after it was listed in a transition AgentENV shows as paused (being paused, snapshotted or forked), counted lost: a pause it joined failed and the server removed it, or its user deleted it meanwhile; %w",
			b.ID(), se))
	}
	return err
}

// A sizedSandbox is a sandbox of src with the size the unfiltered listing
// gave it (memoryMB): the drain's plan and the Preserver count its pause
// by its size, as they do a running one's.
type sizedSandbox struct {
	pause.Sandbox
	size int64
}

// Size implements pause.Sized.
func (b *sizedSandbox) Size() int64 { return b.size }

// closeIdleConnections closes the idle connections of the listers' clients
// (httpsource.Source.CloseIdleConnections).
func (l *notPaused) closeIdleConnections() {
	for _, src := range []*httpsource.Source{l.all, l.shown, l.paused} {
		src.CloseIdleConnections()
	}
}

// settleInterval is how often settle lists while it waits.
const settleInterval = 250 * time.Millisecond

// settle waits until each of ids (sandboxes whose pause was given up on)
// is listed paused, or is no longer shown paused (running again: its pause
// failed; or gone), or until by, listing every settleInterval. It returns
// when each was first listed paused. A listing that fails is tried again
// at the next interval (at the time a Retry-After names, when later: settleWait):
// the server, not sent its SIGTERM yet, is finishing those pauses, and a 503
// or a reset connection now says nothing of them.
// One that fails permanently (a refused key) ends the wait. One that
// fails after its first page (a page 2's 503) settles the ones it listed
// paused all the same. The error returned is the last listing's when it
// failed, nil when it answered.
func (l *notPaused) settle(ctx context.Context, ids []string, by time.Time) (map[string]time.Time, error) {
	ctx, cancel := context.WithDeadline(ctx, by)
	defer cancel()
	waiting := map[string]bool{}
	for _, id := range ids {
		waiting[id] = true
	}
	settled := map[string]time.Time{}
	var failed error // the last listing's error
	for len(waiting) > 0 {
		paused, shown, err := l.settleListing(ctx)
		// One listed paused is paused, whatever the listing's later pages
		// answered (a page 2's 503).
		for _, id := range paused {
			if waiting[id] {
				settled[id] = time.Now()
				delete(waiting, id)
			}
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return settled, failed // the wait's end, not the listing's fault
		case err != nil && errors.As(err, new(*backoff.PermanentError)):
			return settled, err
		case err != nil:
			failed = err
		default:
			failed = nil
			for id := range waiting {
				if !slices.Contains(shown, id) {
					delete(waiting, id)
				}
			}
		}
		if len(waiting) == 0 || !sleepCtx(ctx, settleWait(err)) {
			return settled, failed
		}
	}
	return settled, nil
}

// settleWait is how long settle waits after a listing that ended with err:
// settleInterval, or until the time an overload answer's Retry-After named
// (a pause.Lister's RetryAt), when that is later. Listed again every
// settleInterval, AgentENV answering 503 "Retry-After: 2" got 8 listings
// more in those 2 s, while it was finishing the very pauses waited for
// (docs/faults.md row 1373).
func settleWait(err error) time.Duration {
	var ra interface{ RetryAt() time.Time }
	if errors.As(err, &ra) {
		return max(settleInterval, time.Until(ra.RetryAt()))
	}
	return settleInterval
}

// settleListing lists the IDs listed paused, then the ones shown paused.
// A listing that failed after its first page gives what it listed paused
// with its error, and no ones shown paused: only a complete listing says
// which are not.
func (l *notPaused) settleListing(ctx context.Context) (paused, shown []string, err error) {
	sbs, err := l.paused.List(ctx)
	if paused = sandboxIDs(sbs); err != nil {
		return paused, nil, err
	}
	if sbs, err = l.shown.List(ctx); err != nil {
		return paused, nil, err
	}
	return paused, sandboxIDs(sbs), nil
}

// sleepCtx sleeps for d and reports whether ctx was still live then.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
