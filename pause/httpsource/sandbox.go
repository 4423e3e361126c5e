package httpsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"

	"github.com/drainkit/drainkit/internal/follow"
	"github.com/drainkit/drainkit/pause"
)

// sandbox is one sandbox of a Source: Preserve sends its pause request.
type sandbox struct {
	src    *Source
	id     string
	state  listed // what the listing that gave it said of its state (listedstate.Of)
	listed bool   // a listing of src gave it, running (List): not Source.Sandbox
}

// ID implements pause.Sandbox.
func (b *sandbox) ID() string { return b.id }

// sizedSandbox is a sandbox listed with a size (Config.SizeField).
type sizedSandbox struct {
	sandbox
	size int64
}

// Size implements pause.Sized: the bytes the listing gave.
func (b *sizedSandbox) Size() int64 { return b.size }

// Preserve sends the pause request and returns nil on a 2xx answer. It
// returns by ctx's deadline. Errors are classified as described on Source;
// an overload answer is handled inside (see Source) as long as the
// Retry-After wait fits before ctx's deadline and, for a Preserve a
// pause.Preserver calls, its Run's phase deadline (sendBy).
func (b *sandbox) Preserve(ctx context.Context) error {
	s := b.src
	if !s.made() {
		return errNotMade
	}
	ctx, span := s.tracer.Start(ctx, "httpsource.Pause")
	defer span.End()
	span.SetAttributes(attribute.String(attrSandbox, b.id))
	err := b.preserve(ctx)
	if err != nil {
		spanError(span, err)
	}
	return err
}

func (b *sandbox) preserve(ctx context.Context) error {
	s := b.src
	target := s.resolve(strings.ReplaceAll(s.cfg.pausePath, "{id}", url.PathEscape(b.id)))
	var held *StatusError // the overload answer this request is sent again after
	heldOthers := 0       // the other pauses out when it came
	for {
		if err := b.holdOff(ctx); err != nil {
			return err
		}
		if err := s.lim.acquire(ctx, startBy(ctx)); err != nil {
			return b.noSlot(err, held, heldOthers)
		}
		if err := ctx.Err(); err != nil {
			// Ended already (acquire does not look when a slot is free):
			// nothing is sent, so this is no pause the server could go on
			// with, and a gone answer next is not its failure's.
			s.lim.release(false, false)
			return fmt.Errorf("httpsource: pause %s: not sent: %w", b.id, err)
		}
		rctx, cancel := withTimeout(ctx, s.cfg.pauseTimeout, "pause", "Config.PauseTimeout")
		sent := s.checks.sending()
		ans, err := s.do(rctx, "pause", s.cfg.pauseMethod, target)
		status := ans.status
		cancel()
		if err != nil && ans.unsent {
			// None of it was written (no connection: one the client's
			// MaxConnsPerHost held back, a dial refused or cut; or no
			// HTTP/2 stream): no pause the server could go on with, and
			// a gone answer next is not its failure's. Taken for no
			// answer, a sandbox its user deleted meanwhile was counted
			// lost (docs/faults.md rows 2481, 2624).
			s.lim.release(false, false)
			return fmt.Errorf("httpsource: pause %s: not sent: %w", b.id, err)
		}
		if err != nil && status/100 == 2 {
			// The status is the answer, whatever became of a body no pause
			// reads: taken for no answer, a sandbox the server had paused
			// was failed when no retry was left (docs/faults.md row 2361).
			s.cfg.logger.Debug("httpsource: pause answered, its body cut", "sandbox", b.id, "status", status, "err", err)
			err = nil
		}
		var se *StatusError
		overloaded := errors.As(err, &se) && se.Overloaded()
		others := s.lim.release(overloaded, err == nil)
		if overloaded {
			held, heldOthers = se, others
			s.setOverload(se)
		}
		switch {
		case err == nil && status == http.StatusAccepted:
			s.clearFailedPause(b.id)
			if err := b.confirm(ctx); err != nil {
				// The server has the pause and may go on with it, as
				// with one that got no answer: a gone answer next may
				// be its failure's. Forgotten, a sandbox the server
				// removed when that pause failed was Vanished
				// (docs/faults.md row 2623).
				s.setFailedPause(b.id, &unconfirmed{err: err})
				return err
			}
			return nil
		case err == nil:
			s.clearFailedPause(b.id) // a later gone answer is a deletion again
			return nil
		case !overloaded:
			return b.failed(ctx, se, err, sent)
		case others > 0:
			// Our own concurrency explains the overload: the limiter now
			// holds this request back until a slot frees, which is when
			// the server finished one of the others.
			s.cfg.logger.Debug("httpsource: server overloaded, lowering concurrency",
				"sandbox", b.id, "limit", s.lim.current())
			continue
		}
		if se.RetryAfter <= 0 {
			return se // transient; the Preserver's backoff spaces the retry
		}
		until := time.Now().Add(se.RetryAfter)
		s.setNotBefore(b.id, holdOff{until, se})
		if dl, ok := sendBy(ctx); ok && !until.Before(dl) { // at dl is past it: nothing is sent there
			return &retryLater{err: fmt.Errorf("%w: %w", se, errNoFit), at: until}
		}
	}
}

// The listing's polls after a 202 Accepted to a pause (confirm): the first
// after acceptedPollFirst, each wait twice the one before, up to
// acceptedPollMax. A pause takes from milliseconds to minutes: the first
// polls find a quick one soon, the later ones cost a listing a second.
const (
	acceptedPollFirst = 50 * time.Millisecond
	acceptedPollMax   = time.Second
)

// confirm settles a pause the server answered 202 Accepted: the request
// "accepted for processing, but the processing has not been completed"
// (RFC 9110, section 15.3.3). The sandbox is preserved once a listing no
// longer shows it in a running state (paused, or gone from the listing),
// polled until ctx ends; then it is not preserved, and the error names the
// 202 and the last listing (its error, if it failed). Taken for done at
// the 202, the sandbox was counted preserved while the server still ran
// it, and the server's SIGTERM then ended it unpaused. No pause is sent
// again: the server has this one. A listing answered overloaded with a
// Retry-After is polled again at the time it names, not sooner, and not
// at all when that time is past ctx's deadline: the error says so.
func (b *sandbox) confirm(ctx context.Context) error {
	wait := acceptedPollFirst
	var listErr error
	for {
		var lr *retryLater
		if errors.As(listErr, &lr) {
			if dl, ok := ctx.Deadline(); ok && lr.at.After(dl) {
				return fmt.Errorf("httpsource: pause %s: answered %d %s, not confirmed: the last listing failed, and asks for none before %s, past the deadline: %w",
					b.id, http.StatusAccepted, http.StatusText(http.StatusAccepted), lr.at.UTC().Format(time.RFC3339Nano), listErr)
			}
			wait = max(wait, time.Until(lr.at))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			why := "still listed running"
			if listErr != nil {
				why = fmt.Sprintf("not confirmed: the last listing failed: %v", listErr)
			}
			return fmt.Errorf("httpsource: pause %s: answered %d %s, %s when its context ended: %w",
				b.id, http.StatusAccepted, http.StatusText(http.StatusAccepted), why, ctx.Err())
		case <-t.C:
		}
		ids, err := b.src.RunningIDs(ctx)
		switch {
		case err != nil:
			listErr = err
		case !slices.Contains(ids, b.id):
			return nil
		default:
			listErr = nil
		}
		wait = min(2*min(wait, acceptedPollMax), acceptedPollMax)
	}
}

// noSlot is the error of a pause whose context ended, err, while it waited
// for a request slot, saying why it waited: held, the overload answer to
// this request while others other pauses were out, after which it queued
// again; or the Source's limit, lowered by an overload answer to another
// sandbox's pause, or Config.MaxInFlight. "Waiting for a request slot"
// alone tells the Report's reader nothing of the server's 429.
func (b *sandbox) noSlot(err error, held *StatusError, others int) error {
	s := b.src
	limit := s.lim.current()
	switch last := s.overload(); {
	case held != nil:
		return fmt.Errorf("httpsource: pause %s: waiting for a request slot: %w (queued again after the server answered it overloaded with %s out, sending %d at once since: %w)",
			b.id, err, otherPauses(others), limit, held)
	case last != nil && limit < s.lim.max:
		return fmt.Errorf("httpsource: pause %s: waiting for a request slot: %w (sending %d at once since the server answered overloaded: %v)",
			b.id, err, limit, last)
	case s.cfg.maxInFlight > 0:
		return fmt.Errorf("httpsource: pause %s: waiting for a request slot: %w (Config.MaxInFlight: %d at once)",
			b.id, err, limit)
	}
	return fmt.Errorf("httpsource: pause %s: waiting for a request slot: %w", b.id, err)
}

// otherPauses says how many other pauses were out.
func otherPauses(n int) string {
	switch n {
	case 0:
		return "no other pause"
	case 1:
		return "1 other pause"
	}
	return fmt.Sprintf("%d other pauses", n)
}

// failed classifies a pause request that failed other than by overload:
// err, and se when it is a non-2xx answer; sent is when it was sent, as
// the check listings count (runningChecks.sending).
func (b *sandbox) failed(ctx context.Context, se *StatusError, err error, sent uint64) error {
	gone := b.src.cfg.gone
	if se != nil && !slices.Contains(gone, se.StatusCode) {
		if kerr := b.src.keyRefusal(se, "pause "+b.id); kerr != nil {
			return kerr // transient: the file may hold a key the server accepts by the retry
		}
	}
	switch {
	case se == nil:
		// No answer: a connection failure, the pause timeout, or ctx
		// ending (the drain's deadline, the Preserver's bound of the
		// sandbox, Force) once the request had its connection (preserve
		// returned one that never got any: not sent). The server may go on
		// with the pause, and a gone answer to a later one (the final
		// sweep's) may be its failure's. Transient while ctx lasts; the
		// Preserver reads ctx's end itself.
		return b.src.noAnswerTo(b.id, err)
	case se.StatusCode == http.StatusConflict && !slices.Contains(gone, se.StatusCode) && b.src.cfg.retryConflict:
		if conflictState(se.Body) == "paused" {
			// Paused already: a server answering so is the one the API
			// spec's 409 describes, not AgentENV's code (204). After a
			// pause of ours that got no answer, which the server went on
			// with, by that pause: preserved; else by someone else.
			if b.src.mayHaveGoneOn(b.id) {
				b.src.clearFailedPause(b.id)
				return nil
			}
			return fmt.Errorf("%w: %w (already paused)", pause.ErrGone, se)
		}
		if conflictState(se.Body) == "pausing" {
			// A pause in progress, someone else's (or one of ours that got
			// no answer, which the record keeps): should it fail terminally,
			// AgentENV removes the sandbox, and the next answer is 404.
			b.src.notePauseInProgress(b.id, se)
		}
		return fmt.Errorf("%w (a state the server will not pause yet: retry)", se)
	case se.StatusCode == http.StatusConflict && !slices.Contains(gone, se.StatusCode):
		return b.resolveConflict(ctx, se)
	case se.StatusCode >= 500:
		b.src.setFailedPause(b.id, se)
	case slices.Contains(gone, se.StatusCode):
		if prev := b.src.failedPause(b.id); prev != nil {
			return backoff.Permanent(lostAfter(b.id, prev, se))
		}
		if err := b.stillListed(ctx, se, sent); err != nil {
			return err
		}
	}
	return classify(se, gone)
}

// stillListed returns the transient error of se, a gone answer to the
// pause of a sandbox the listing still shows running, or nil when it no
// longer does (gone). A pause path the server does not have (a typo, a
// proxy that routes only the listing) answers every pause 404: taken for
// gone, every sandbox was vanished, listed running at every pass, and the
// Report said none lost while SIGKILL took them all (docs/faults.md row
// 1763). A sandbox being deleted (AgentENV lists one being killed running)
// is gone at a retry, once the listing no longer shows it.
//
// Which listing: for a sandbox's first gone answer, the one that gave it
// (List), which listed it running before its pause was sent, and then
// makes no request: the answer is transient, as one still listed is (a
// sandbox being deleted, listed running until it is gone, is retried
// either way), unless no retry may be sent any more (mayRetry). For a later one, or a sandbox no listing gave
// (Source.Sandbox), a listing made since the answer before (or since the
// pause was sent, sent) decides, one the gone answers share
// (runningChecks). One each, a wrong pause path made a listing of every
// page per pause, 149 listings in 20 s for 200 sandboxes behind AgentENV's
// double, one at a time only because the pauses were, and a server
// limiting its rate answered them 429 (docs/faults.md row 2161). A listing
// that fails transiently (429, 5xx, no answer, its context's end) leaves
// the answer undecided, transient, and a retry lists again: taken for
// gone, a sandbox whose check a 429 or the deadline cut was vanished, 199
// of 200 with a wrong path behind a rate limit. One that fails permanently
// (a server with no listing) can never say: the answer stands.
func (b *sandbox) stillListed(ctx context.Context, se *StatusError, sent uint64) error {
	s := b.src
	after, answered := s.goneBefore(b.id)
	defer s.noteGone(b.id)
	if !answered && b.listed && mayRetry(ctx) {
		return fmt.Errorf("%w (yet listed running by the listing that gave it, before its pause: not known gone; %s)", se, s.wrongPath())
	}
	if !answered {
		after = sent
	}
	running, err := s.checks.since(ctx, after, s.RunningIDs)
	switch {
	case err != nil && errors.As(err, new(*backoff.PermanentError)):
		return nil // no listing will say: the answer stands
	case err != nil:
		return fmt.Errorf("%w (undecided, listing again failed: %v; %s)", se, err, s.wrongPath())
	case !running[b.id]:
		return nil
	}
	return fmt.Errorf("%w (yet still listed running: not gone; %s)", se, s.wrongPath())
}

// mayRetry reports whether a pause under ctx may still be sent again: not
// past sendBy. One that may not is settled by a listing at its first gone
// answer, as a sandbox being deleted as the phase ends is gone, not
// failed.
func mayRetry(ctx context.Context) bool {
	by, ok := sendBy(ctx)
	return !ok || time.Now().Before(by)
}

// wrongPath says what a gone answer for a sandbox listed running is.
func (s *Source) wrongPath() string {
	return fmt.Sprintf("a pause path the server does not have, Config.PausePath %q, or a sandbox being deleted: retry", s.cfg.pausePath)
}

// goneBefore returns the count of check listings started (runningChecks)
// when the sandbox's last gone answer was settled, and whether it had one.
func (s *Source) goneBefore(id string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.goneAt[id]
	return n, ok
}

// noteGone records that a gone answer for the sandbox was settled now: its
// next one takes a listing started after this (stillListed).
func (s *Source) noteGone(id string) {
	n := s.checks.sending()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.goneAt[id] = n
}

// runningChecks are the listings that settle gone answers (stillListed),
// one at a time, each shared by every answer to a pause sent before it
// started. They are counted: a pause notes the count as it is sent
// (sending), and a listing numbered above it was made since.
type runningChecks struct {
	mu      sync.Mutex
	started uint64        // listings started
	last    *runningCheck // the last one started; nil before the first
}

// A runningCheck is one listing of runningChecks: the IDs it listed
// running, or its error, once done is closed.
type runningCheck struct {
	n       uint64
	done    chan struct{}
	running map[string]bool
	err     error
}

// sending returns the number of listings started: the value a pause sent
// now passes to since.
func (c *runningChecks) sending() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// since returns what a listing started after sent (a count sending
// returned) listed running: the one in progress or done, if it started
// after; otherwise the next, started with list once the one in progress,
// if any, has ended, and made by ctx's deadline (shared). It returns
// ctx's error when ctx ends first.
func (c *runningChecks) since(ctx context.Context, sent uint64, list func(context.Context) ([]string, error)) (map[string]bool, error) {
	for {
		c.mu.Lock()
		l := c.last
		switch {
		case l != nil && l.n > sent:
			c.mu.Unlock()
			return l.wait(ctx)
		case l != nil && !l.ended():
			c.mu.Unlock()
			if _, err := l.wait(ctx); ctx.Err() != nil {
				return nil, err
			}
			continue // a listing made since comes next
		}
		c.started++
		l = &runningCheck{n: c.started, done: make(chan struct{})}
		c.last = l
		c.mu.Unlock()
		go l.run(shared(ctx), list)
		return l.wait(ctx)
	}
}

// shared returns the context of a listing ctx's caller starts for others
// too: ctx's deadline and values, not its cancellation. Cancelled (its
// sandbox's Preserve given up, a Force), ctx would cut the listing every
// other gone answer waits for, which would then make another. With no
// deadline it is ctx itself, so that a listing is never left without an
// end (Config.ListTimeout may be none): it ends with the list timeout, if
// any, or with ctx's cancellation, which then fails it for the others
// waiting (transient: they list again at their retry).
func shared(ctx context.Context) context.Context {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx
	}
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl)
	context.AfterFunc(sctx, cancel)
	return sctx
}

// run makes the listing with list and records what it listed running.
func (l *runningCheck) run(ctx context.Context, list func(context.Context) ([]string, error)) {
	ids, err := list(ctx)
	l.running, l.err = make(map[string]bool, len(ids)), err
	for _, id := range ids {
		l.running[id] = true
	}
	close(l.done)
}

// wait waits for the listing and returns its result, or ctx's error.
func (l *runningCheck) wait(ctx context.Context) (map[string]bool, error) {
	select {
	case <-l.done:
		return l.running, l.err
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a listing: %w", context.Cause(ctx))
	}
}

// ended reports whether the listing is done.
func (l *runningCheck) ended() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// An unconfirmed is the record of a pause the server answered 202
// Accepted that no listing showed done before its context ended, err
// (confirm): the server has it and may go on with it, as with a pause
// that got no answer. A record only, never returned: it does not unwrap,
// so that a listing's answer in err (a 429) is not taken for the pause's.
type unconfirmed struct{ err error }

func (e *unconfirmed) Error() string { return e.err.Error() }

// lostAfter is the error of a gone answer se to a pause of the sandbox id
// after an earlier pause of it failed with prev: a 5xx answer, a 409
// naming a pause in progress, none, or a 202 never confirmed
// (unconfirmed). AgentENV removes a sandbox whose
// pause failed terminally (the VM could not be put back) and answers 500:
// the sandbox is lost, not gone. A pause that got no answer (its timeout,
// a connection reset) may have been that one, the server going on with
// it, and so may the pause in progress a 409 named (its user's, its
// timeout's, which this one waited on): the gone answer is its removal, or
// a deletion by the sandbox's user meanwhile, and only the first is a loss
// that nothing else would report.
func lostAfter(id string, prev error, se *StatusError) error {
	if u, ok := prev.(*unconfirmed); ok {
		return fmt.Errorf("httpsource: pause %s: gone after the server accepted a pause of it that no listing showed done (%v), counted lost: that pause may have failed and the server removed the sandbox, or its user deleted it meanwhile; now %w",
			id, u, se)
	}
	var p *StatusError
	if errors.As(prev, &p) && p.StatusCode == http.StatusConflict {
		return fmt.Errorf("httpsource: pause %s: gone after the server named a pause of it in progress (%d %s: %s), counted lost: that pause may have failed and the server removed the sandbox (AgentENV does), or its user deleted it meanwhile; now %w",
			id, p.StatusCode, http.StatusText(p.StatusCode), p.Body, se)
	}
	if errors.As(prev, &p) {
		return fmt.Errorf("httpsource: pause %s: removed by the server after a failed pause, lost: the earlier pause got %d %s (%s), now %w",
			id, p.StatusCode, http.StatusText(p.StatusCode), p.Body, se)
	}
	return fmt.Errorf("httpsource: pause %s: gone after a pause that got no answer (%v), counted lost: the server may have gone on with that pause and removed the sandbox when it failed (AgentENV does), or its user deleted it meanwhile; now %w",
		id, prev, se)
}

// conflictState returns the state a 409's body names, AgentENV's way
// ({"message": "sandbox cannot be paused from STATE state"}, lower case),
// or "" when it names none.
func conflictState(body string) string {
	var msg struct {
		Message string `json:"message"`
	}
	if json.Unmarshal([]byte(body), &msg) == nil && msg.Message != "" {
		body = msg.Message
	}
	_, rest, ok := strings.Cut(body, "cannot be paused from ")
	if !ok {
		return ""
	}
	state, _, ok := strings.Cut(rest, " state")
	if !ok || strings.ContainsAny(state, " \t\n\"") {
		return ""
	}
	return strings.ToLower(state)
}

// resolveConflict decides what a 409 means by listing again: the sandbox
// is no longer running (already paused, or gone) -> pause.ErrGone, or nil
// (preserved) after a pause of ours that the server may have gone on with
// (mayHaveGoneOn); it is
// still listed running (a transitional state, such as resuming, the server
// would not pause) -> transient, so the Preserver retries it in the time
// left. When the listing fails, the 409 is undecided and takes the
// listing's class, its error named: a retry lists again after a transient
// failure (a sandbox paused meanwhile is then gone, not lost), and none
// would after a permanent one.
func (b *sandbox) resolveConflict(ctx context.Context, se *StatusError) error {
	ids, err := b.src.RunningIDs(ctx)
	switch {
	case err != nil:
		undecided := fmt.Errorf("%w (undecided: listing again failed: %v)", se, err)
		if errors.As(err, new(*backoff.PermanentError)) {
			return backoff.Permanent(undecided)
		}
		return undecided
	case slices.Contains(ids, b.id):
		return fmt.Errorf("%w (still listed running: retry)", se)
	case b.src.mayHaveGoneOn(b.id):
		// Paused by a pause of ours the server went on with (its
		// answer lost, its timeout): preserved, as the 409 naming the
		// state paused is with RetryConflict. Taken for gone, it was
		// Vanished, already preserved by someone else (docs/faults.md
		// row 2625).
		b.src.clearFailedPause(b.id)
		return nil
	default:
		return fmt.Errorf("%w: %w (no longer listed running)", pause.ErrGone, se)
	}
}

// mayHaveGoneOn reports whether the last failed pause of the sandbox is
// one the server may have gone on with: one that got no answer, or a 202
// never shown done, not a failure the server answered (a 5xx, a 409
// naming a pause in progress: *StatusError).
func (s *Source) mayHaveGoneOn(id string) bool {
	prev := s.failedPause(id)
	return prev != nil && !errors.As(prev, new(*StatusError))
}

// sendBy returns the time past which a pause under ctx is not sent: ctx's
// deadline, or the phase deadline of the Preserver's Run the Preserve is
// called by (follow.StartBy), if earlier. A Preserve's context runs on to
// the Run's hard deadline, for a pause in flight to end; a pause sent again
// after a Retry-After is a new start, which the Preserver makes none of
// past the phase deadline (nor a retry of its own): sent there, it kept the
// Run, and took from the drain's steps after the phase (their windows are
// laid out when they start) the time to the hard deadline.
func sendBy(ctx context.Context) (time.Time, bool) {
	if by := startBy(ctx); !by.IsZero() {
		return by, true
	}
	return ctx.Deadline()
}

// startBy returns the phase deadline of the Preserver's Run whose
// Preserve ctx is, if it ends before ctx does (see sendBy), or the zero
// time: a slot wait then ends with ctx alone.
func startBy(ctx context.Context) time.Time {
	by, ok := follow.StartBy(ctx)
	if dl, has := ctx.Deadline(); !ok || has && !by.Before(dl) {
		return time.Time{}
	}
	return by
}

// A holdOff is a sandbox's Retry-After time and the answer that set it.
type holdOff struct {
	until  time.Time
	answer *StatusError
}

// holdOff waits until the sandbox's Retry-After time, if one is set and it
// fits before the time past which no pause is sent (sendBy: ctx's
// deadline, or the Run's phase deadline if earlier); otherwise it fails at
// once without a request, naming the answer that asked for the wait.
func (b *sandbox) holdOff(ctx context.Context) error {
	s := b.src
	s.mu.Lock()
	h := s.notBefore[b.id]
	s.mu.Unlock()
	until := h.until
	wait := time.Until(until)
	if wait <= 0 {
		return nil
	}
	if dl, ok := sendBy(ctx); ok && !until.Before(dl) { // as the Preserver's rule: a wait to the deadline sends nothing
		if h.answer.RetryAfter == maxRetryAfter {
			// Saturated: its time is no time the server named.
			return &retryLater{at: until, err: fmt.Errorf("httpsource: pause %s: server asked to wait longer than any deadline (%w): %w",
				b.id, h.answer, errNoFit)}
		}
		return &retryLater{at: until, err: fmt.Errorf("httpsource: pause %s: server asked to wait until %s (%w): %w",
			b.id, until.UTC().Format(time.RFC3339Nano), h.answer, errNoFit)}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("httpsource: pause %s: waiting for Retry-After: %w (%w)", b.id, ctx.Err(), h.answer)
	}
}

// A noAnswer is the error of a pause that got no answer, err (a connection
// failure, the pause timeout, its context ending), sent after an earlier
// pause of the same sandbox failed, before: the server answered it with a
// failure (*StatusError: a 5xx, AgentENV's snapshot failed and the VM
// resumed; a 409 naming a pause in progress), or it got no answer either
// (the preserve phase's, cut by its hard deadline, which the server may
// still be going on with). That pause is why this one was sent again, and
// what the server said or did of the sandbox: said as err alone, a pause
// the hard deadline cut read "no answer before its context ended: ...
// context deadline exceeded" in the Report, the 500 lost (docs/faults.md
// row 1760), or the final sweep's cut read as a slow pause of the sweep's
// own (row 2362). It unwraps to err alone: the pause before is not this
// one.
type noAnswer struct {
	err    error
	before error // the first of the pauses before it that failed so
}

func (e *noAnswer) Error() string {
	switch e.before.(type) {
	case *StatusError:
		return fmt.Sprintf("%v; the pause before it failed: %v", e.err, e.before)
	case *unconfirmed:
		return fmt.Sprintf("%v; the pause before it was accepted and never shown done: %v", e.err, e.before)
	}
	return fmt.Sprintf("%v; the pause before it got no answer either: %v", e.err, e.before)
}

func (e *noAnswer) Unwrap() error { return e.err }

// noAnswerTo records err, a pause of the sandbox id that got no answer, as
// its last failed pause, and returns it naming the pause before it that
// failed, if there was one (noAnswer): the first of a run of them, so that
// a sandbox whose pauses go on failing is named with two, not all.
func (s *Source) noAnswerTo(id string, err error) error {
	var before error
	switch prev := s.failedPause(id).(type) {
	case nil:
	case *noAnswer:
		before = prev.before
	default: // a failure answered (*StatusError), or no answer
		before = prev
	}
	if before != nil {
		err = &noAnswer{err: err, before: before}
	}
	s.setFailedPause(id, err)
	return err
}

// setFailedPause records that a pause of the sandbox failed with err: a
// 5xx answer (*StatusError), none, or a 202 never shown done
// (*unconfirmed).
func (s *Source) setFailedPause(id string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pauseFailed[id] = err
}

// notePauseInProgress records se, a 409 naming a pause of the sandbox in
// progress, unless a failure of one of ours is recorded already: that one
// says more (a pause of ours that got no answer may be the one in
// progress).
func (s *Source) notePauseInProgress(id string, se *StatusError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pauseFailed[id] == nil {
		s.pauseFailed[id] = se
	}
}

// clearFailedPause forgets the failures of the sandbox's pauses, its
// refusals of the key included.
func (s *Source) clearFailedPause(id string) {
	s.keyAccepted("pause " + id)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pauseFailed, id)
}

// failedPause returns how the last failed pause of the sandbox failed (a
// 5xx answer, a 409 naming a pause in progress, none, or a 202 never
// shown done), or nil.
func (s *Source) failedPause(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pauseFailed[id]
}

// setOverload records se, an overload answer to a pause: the last one
// lowered the Source's limit.
func (s *Source) setOverload(se *StatusError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastOverload = se
}

// overload returns the last overload answer to a pause, or nil.
func (s *Source) overload() *StatusError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastOverload
}

func (s *Source) setNotBefore(id string, h holdOff) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notBefore[id] = h
}
