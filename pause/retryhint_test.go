package pause_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

// serverSaysLater is a listing error whose server asked not to be listed
// again before at (an HTTP Retry-After), as the Lister contract says.
type serverSaysLater struct{ at time.Time }

func (e *serverSaysLater) Error() string      { return "429 Too Many Requests" }
func (e *serverSaysLater) RetryAt() time.Time { return e.at }

// panicsLater is a listing error whose RetryAt panics.
type panicsLater struct{}

func (panicsLater) Error() string      { return "list: 429 Too Many Requests" }
func (panicsLater) RetryAt() time.Time { panic("no header") }

// wakes is an error whose WaitRetry returns when ready is closed; one
// with ignore set never returns.
type wakes struct {
	ready  chan struct{}
	ignore bool
}

func (e *wakes) Error() string { return "refused: the key is being rotated" }
func (e *wakes) WaitRetry(ctx context.Context) {
	if e.ignore {
		time.Sleep(time.Hour) // ctx ignored
		return
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
	}
}

// listAfter returns a Lister that fails with err n times, then lists one
// sandbox that preserves at once, and the times of its calls.
func listAfter(n int, err func() error) (pause.Lister, *[]time.Time) {
	var at []time.Time
	return pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
		at = append(at, time.Now())
		switch {
		case len(at) <= n:
			return nil, err()
		case len(at) == n+1:
			return []pause.Sandbox{instant("sb-1")}, nil
		}
		return nil, nil
	}), &at
}

// listOnce lists sbs, then nothing: a node whose sandboxes are all preserved
// by the first pass.
func listOnce(sbs ...pause.Sandbox) pause.Lister {
	listed := false
	return pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
		if listed {
			return nil, nil
		}
		listed = true
		return sbs, nil
	})
}

type instant string

func (s instant) ID() string                       { return string(s) }
func (instant) Preserve(ctx context.Context) error { return nil }

// A listing error that says when its server will answer (RetryAt) is
// listed again then, whatever the backoff says; one that says a time past
// the phase deadline is not listed again, and the Report says why.
func TestListingErrorsRetryAtIsWhenTheListingIsMadeAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			after   time.Duration
			backOff time.Duration
		}{{3 * time.Second, 200 * time.Millisecond}, {time.Second, 20 * time.Second}} {
			l, at := listAfter(1, func() error { return &serverSaysLater{time.Now().Add(c.after)} })
			p, err := pause.New(l, pause.Config{BackOff: constant(c.backOff)})
			require.NoError(t, err)
			rep, _ := runFor(t, p, time.Minute, 0)
			assert.Equal(t, 1, rep.Counts[pause.Preserved], "%v", rep.Err())
			require.GreaterOrEqual(t, len(*at), 2)
			assert.Equal(t, c.after, (*at)[1].Sub((*at)[0]), "backoff %v", c.backOff)
		}

		// A time already past (a Retry-After of 0) names no wait: the
		// policy's stands, as for a Preserve's.
		l, at := listAfter(1, func() error { return &serverSaysLater{time.Now()} })
		p, err := pause.New(l, pause.Config{BackOff: constant(2 * time.Second)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		assert.Equal(t, 1, rep.Counts[pause.Preserved], "%v", rep.Err())
		require.GreaterOrEqual(t, len(*at), 2)
		assert.Equal(t, 2*time.Second, (*at)[1].Sub((*at)[0]), "a time already past")

		l, at = listAfter(100, func() error { return &serverSaysLater{time.Now().Add(2 * time.Minute)} })
		p, err = pause.New(l, pause.Config{})
		require.NoError(t, err)
		rep, took := runFor(t, p, time.Minute, 0)
		assert.Zero(t, took)
		assert.Len(t, *at, 1)
		assert.True(t, rep.Unknown)
		assert.Contains(t, rep.ListErr, "429 Too Many Requests (not listed again: the answer asks for no listing before 2000-01-01T00:")
		assert.Contains(t, rep.ListErr, "past the phase deadline")
	})
}

// Without a phase deadline a RetryAt is waited for, at most 5 minutes (the
// default policy's whole time): a server asking for a year does not hold
// the Run for it.
func TestRetryAtWithoutADeadlineIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, at := listAfter(1, func() error { return &serverSaysLater{time.Now().Add(365 * 24 * time.Hour)} })
		p, err := pause.New(l, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep := p.Run(context.Background(), time.Time{})
		assert.Equal(t, 1, rep.Counts[pause.Preserved], "%v", rep.Err())
		assert.Equal(t, 5*time.Minute, (*at)[1].Sub((*at)[0]))
	})
}

// A RetryAt that panics is ignored, the backoff used, and said once.
func TestRetryAtThatPanicsKeepsToTheBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		l, at := listAfter(2, func() error { return panicsLater{} })
		p, err := pause.New(l, pause.Config{BackOff: constant(time.Second), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		assert.Equal(t, 1, rep.Counts[pause.Preserved], "%v", rep.Err())
		assert.Equal(t, time.Second, (*at)[1].Sub((*at)[0]))
		assert.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("pause: the RetryAt of an error panicked")), logs.String())
	})
}

// A listing error's WaitRetry ends the backoff's wait when it returns, and
// one that ignores its context is abandoned when the wait ends: the
// listing is made again then.
func TestListingErrorsWaitRetryEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ready := make(chan struct{})
		time.AfterFunc(2*time.Second, func() { close(ready) })
		l, at := listAfter(1, func() error { return &wakes{ready: ready} })
		p, err := pause.New(l, pause.Config{BackOff: constant(time.Minute)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, 5*time.Minute, 0)
		assert.Equal(t, 1, rep.Counts[pause.Preserved], "%v", rep.Err())
		assert.Equal(t, 2*time.Second, (*at)[1].Sub((*at)[0]), "woken")

		l, at = listAfter(1, func() error { return &wakes{ignore: true} })
		p, err = pause.New(l, pause.Config{BackOff: constant(3 * time.Second)})
		require.NoError(t, err)
		rep, _ = runFor(t, p, 5*time.Minute, 0)
		assert.Equal(t, 1, rep.Counts[pause.Preserved], "%v", rep.Err())
		assert.Equal(t, 3*time.Second, (*at)[1].Sub((*at)[0]), "abandoned at the backoff's wait")
		time.Sleep(time.Hour) // the abandoned WaitRetry returns
	})
}

// refusedUntil is a sandbox whose Preserve fails with err until ready
// is closed.
type refusedUntil struct {
	ready chan struct{}
	err   error
	tries []time.Time
}

func (s *refusedUntil) ID() string { return "sb-1" }
func (s *refusedUntil) Preserve(ctx context.Context) error {
	s.tries = append(s.tries, time.Now())
	select {
	case <-s.ready:
		return nil
	default:
		return s.err
	}
}

// A Preserve's error whose WaitRetry returns ends the backoff's wait: the
// sandbox is tried again then, not when the backoff's wait would end; one
// that does not still never starts a retry past the phase deadline.
func TestPreserveErrorsWaitRetryEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ready := make(chan struct{})
		sb := &refusedUntil{ready: ready, err: &wakes{ready: ready}}
		time.AfterFunc(2500*time.Millisecond, func() { close(ready) })
		p, err := pause.New(listOnce(sb), pause.Config{BackOff: constant(time.Minute)})
		require.NoError(t, err)
		start := time.Now()
		rep, _ := runFor(t, p, 5*time.Minute, 0)
		assert.Equal(t, 1, rep.Counts[pause.Preserved], "%v", rep.Err())
		require.Len(t, sb.tries, 2)
		assert.Equal(t, 2500*time.Millisecond, sb.tries[1].Sub(start))

		never := &refusedUntil{ready: make(chan struct{}), err: &wakes{ignore: true}}
		p, err = pause.New(listOnce(never), pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, took := runFor(t, p, 10*time.Second, 0)
		assert.Equal(t, 1, rep.Counts[pause.Failed], "%v", rep.Entries)
		assert.LessOrEqual(t, took, 10*time.Second)
		assert.Len(t, never.tries, 10, "a try a second, none past the phase")
		time.Sleep(time.Hour) // the abandoned WaitRetrys return
	})
}

// pushedBack is a sandbox whose Preserve fails n times with the error
// after returns (a server's "come back at ..."), then succeeds; tries are
// the times of its calls.
type pushedBack struct {
	n     int
	after func() error
	tries []time.Time
}

func (s *pushedBack) ID() string { return "sb-1" }
func (s *pushedBack) Preserve(ctx context.Context) error {
	s.tries = append(s.tries, time.Now())
	if len(s.tries) <= s.n {
		return s.after()
	}
	return nil
}

// comeBackIn returns a Preserve error whose RetryAt is d from when it is
// made.
func comeBackIn(d time.Duration) func() error {
	return func() error { return &serverSaysLater{time.Now().Add(d)} }
}

// Fault: a Preserve's error that says when its server will answer
// (RetryAt: an API's 429 or 503 with Retry-After to a pause, a gRPC
// server's pushback) was retried when the backoff said: sooner (the
// default policy's first wait, 0.1 to 0.3 s, against a server's 3 s: its
// capacity spent on the refusals) or later (a 20 s policy against 1 s:
// the phase's time spent). The sandbox is now tried again at the time the
// server named, by the listing's rule.
func TestPreserveErrorsRetryAtIsWhenTheSandboxIsTriedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			after   time.Duration
			backOff func() backoff.BackOff // nil: the default
		}{{3 * time.Second, nil}, {time.Second, constant(20 * time.Second)}} {
			sb := &pushedBack{n: 1, after: comeBackIn(c.after)}
			p, err := pause.New(listOnce(sb), pause.Config{BackOff: c.backOff})
			require.NoError(t, err)
			rep, _ := runFor(t, p, time.Minute, 0)
			assert.Equal(t, 1, rep.Counts[pause.Preserved], "%v", rep.Err())
			require.Len(t, sb.tries, 2)
			assert.Equal(t, c.after, sb.tries[1].Sub(sb.tries[0]), "tried again when the server asked")
		}

		// Without a deadline, at most 5 minutes, as a listing's.
		sb := &pushedBack{n: 1, after: comeBackIn(365 * 24 * time.Hour)}
		p, err := pause.New(listOnce(sb), pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep := p.Run(context.Background(), time.Time{})
		assert.Equal(t, 1, rep.Counts[pause.Preserved], "%v", rep.Err())
		require.Len(t, sb.tries, 2)
		assert.Equal(t, 5*time.Minute, sb.tries[1].Sub(sb.tries[0]))
	})
}

// A RetryAt at or past the phase deadline, or past the sandbox's own
// (Config.SandboxTimeout), is not waited for: the sandbox ends Failed at
// once, its error naming the time the server asked for and the deadline,
// where the backoff retried it, refused each time, until the deadline,
// holding its slot.
func TestPreserveRetryAtPastTheDeadlineEndsTheSandboxFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			name     string
			after    time.Duration
			timeout  time.Duration // Config.SandboxTimeout
			deadline string
			end      time.Duration
		}{
			{"past the phase", 2 * time.Minute, 0, "the phase deadline", time.Minute},
			{"at the phase", time.Minute, 0, "the phase deadline", time.Minute},
			{"past the sandbox's", 10 * time.Second, 5 * time.Second, "the sandbox's deadline", 5 * time.Second},
		} {
			start := time.Now()
			sb := &pushedBack{n: 1000, after: comeBackIn(c.after)}
			p, err := pause.New(listOnce(sb), pause.Config{SandboxTimeout: c.timeout})
			require.NoError(t, err)
			rep, took := runFor(t, p, time.Minute, 0)
			e := entry(t, rep, "sb-1")
			assert.Equal(t, pause.Failed, e.Outcome, c.name)
			assert.Zero(t, took, c.name)
			assert.Len(t, sb.tries, 1, c.name)
			assert.Equal(t, fmt.Sprintf("429 Too Many Requests (not retried: the answer asks for no retry before %s, past %s %s)",
				start.Add(c.after).UTC().Format(time.RFC3339Nano), c.deadline, start.Add(c.end).UTC().Format(time.RFC3339Nano)), e.Error, c.name)
		}
	})
}

// A RetryAt that names no wait, zero or a time already past (a
// Retry-After of 0), leaves the retry to the backoff: a server that says
// "now" to every attempt gets the policy's waits, not retries with none.
// So does one that panics, said once.
func TestPreserveRetryAtOfNoWaitKeepsToTheBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for name, after := range map[string]func() error{
			"zero":   func() error { return &serverSaysLater{} },
			"past":   comeBackIn(-time.Second),
			"now":    comeBackIn(0),
			"panics": func() error { return panicsLater{} },
		} {
			var logs bytes.Buffer
			sb := &pushedBack{n: 2, after: after}
			p, err := pause.New(listOnce(sb), pause.Config{BackOff: constant(2 * time.Second), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			rep, _ := runFor(t, p, time.Minute, 0)
			assert.Equal(t, 1, rep.Counts[pause.Preserved], "%s: %v", name, rep.Err())
			require.Len(t, sb.tries, 3, name)
			assert.Equal(t, 2*time.Second, sb.tries[1].Sub(sb.tries[0]), name)
			assert.Equal(t, 2*time.Second, sb.tries[2].Sub(sb.tries[1]), name)
			if name == "panics" {
				assert.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("pause: the RetryAt of an error panicked")), logs.String())
			}
		}
	})
}
