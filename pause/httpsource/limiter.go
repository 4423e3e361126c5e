package httpsource

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// probeAfter is how many consecutive successes at the current limit the
// limiter waits for before it lets one more request through. A server that
// really handles one pause at a time then costs one extra 429 per this many
// pauses, and a server whose overload passed gets its concurrency back.
const probeAfter = 16

// A limiter keeps the number of pause requests on the wire at what the
// server showed it can take. It starts unlimited (or at a configured cap):
// the Preserver's own limit is the bound then. An overload answer (429, or
// 503 with Retry-After) while n requests were on the wire lowers the limit to
// n-1, at least 1; probeAfter successes in a row raise it by one.
//
// Waiters are served first come, first served, so a request that got a 429
// and queues again cannot overtake the ones that were waiting, and a slot
// that frees is taken at once: against a server that pauses one sandbox at a
// time, a client with many requests in flight keeps the server exactly as
// busy as a client with one.
type limiter struct {
	mu       sync.Mutex
	limit    int
	max      int
	inflight int
	streak   int // successes since the last change
	waiters  []chan struct{}
}

func newLimiter(max int) *limiter {
	if max <= 0 {
		max = math.MaxInt
	}
	return &limiter{limit: max, max: max}
}

// acquire waits for a slot until ctx ends or, when by is not zero, until
// by (a pause is sent by then or not at all: see sendBy). On failure it
// returns ctx.Err(), or errSendBy at by, and holds none. A slot free at
// or past by, at once or granted as by passed, is not taken: a pause
// queued again after an overload answer that came past the phase
// deadline found one free when another request had ended meanwhile, and
// was sent past it (docs/faults.md row 1281).
func (l *limiter) acquire(ctx context.Context, by time.Time) error {
	if sendByPassed(by) {
		return errSendBy
	}
	l.mu.Lock()
	if l.inflight < l.limit && len(l.waiters) == 0 {
		l.inflight++
		l.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	l.waiters = append(l.waiters, ready)
	l.mu.Unlock()

	var late <-chan time.Time // a timer only for a wait that has one
	if !by.IsZero() {
		t := time.NewTimer(time.Until(by))
		defer t.Stop()
		late = t.C
	}
	var err error
	select {
	case <-ready:
		if !sendByPassed(by) {
			return nil
		}
		err = errSendBy // granted as by passed (both ready at once): handed on below
	case <-ctx.Done():
		err = ctx.Err()
	case <-late:
		err = errSendBy
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-ready: // granted while we gave up: hand the slot on
		l.inflight--
		l.wakeLocked()
	default:
		l.removeLocked(ready)
	}
	return err
}

// sendByPassed reports whether by, the time past which no pause is sent, is set
// and has come.
func sendByPassed(by time.Time) bool { return !by.IsZero() && !time.Now().Before(by) }

// errSendBy is a slot wait's error at the time past which its pause is not
// sent (sendBy): the phase deadline of the Preserver's Run.
var errSendBy = errors.New("the phase deadline passed: the pause is not sent after it")

// release returns a slot. overloaded says the server answered "too many
// requests"; ok says the request succeeded. It returns how many other
// requests were on the wire at that moment.
func (l *limiter) release(overloaded, ok bool) (others int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case overloaded:
		l.limit = min(l.limit, max(1, l.inflight-1))
		l.streak = 0
	case ok && l.limit < l.max:
		l.streak++
		if l.streak >= probeAfter {
			l.limit++
			l.streak = 0
		}
	}
	others = l.inflight - 1
	l.inflight--
	l.wakeLocked()
	return others
}

// current returns the limit, for logs and tests.
func (l *limiter) current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

func (l *limiter) wakeLocked() {
	for l.inflight < l.limit && len(l.waiters) > 0 {
		next := l.waiters[0]
		l.waiters = l.waiters[1:]
		l.inflight++
		close(next)
	}
}

func (l *limiter) removeLocked(ch chan struct{}) {
	for i, w := range l.waiters {
		if w == ch {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			return
		}
	}
}
