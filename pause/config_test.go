package pause_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

func TestNewRejectsBadConfigurationNamingTheField(t *testing.T) {
	node := fakesandbox.NewNode()
	for _, tc := range []struct {
		name string
		list pause.Lister
		cfg  pause.Config
		want string
	}{
		{"nil lister", nil, pause.Config{}, "pause: the Lister must not be nil"},
		{"nil ListFunc", pause.ListFunc(nil), pause.Config{}, "pause: the Lister must not be nil"},
		{"negative limit", node, pause.Config{Limit: -1}, "pause: Config.Limit must be >= 0, got -1"},
		{"negative max limit", node, pause.Config{MaxLimit: -2}, "pause: Config.MaxLimit must be >= 0, got -2"},
		{"max below limit", node, pause.Config{Limit: 8, MaxLimit: 4}, "pause: Config.MaxLimit must be >= Config.Limit (8), got 4"},
		{"negative timeout", node, pause.Config{SandboxTimeout: -time.Second}, "pause: Config.SandboxTimeout must be >= 0, got -1s"},
		{"bad order", node, pause.Config{Order: pause.Order(42)}, "pause: Config.Order must be one of the defined orders, got Order(42)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := pause.New(tc.list, tc.cfg)
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Every field's zero value is its default: the limit adapts from 8 between
// 1 and 32, a Limit alone fixes it, a MaxLimit alone caps the start, and a
// Limit with a MaxLimit is a learned level the first Run takes after an
// epoch at the default start. Limit is what a reserve may count on: 1
// while nothing was measured or learned, a learned level while it is
// below 8, 8 otherwise, until a Run measures one.
func TestZeroConfigIsTheDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   pause.Config
		limit int
	}{
		{"zero", pause.Config{}, 1},
		{"limit and max", pause.Config{Limit: 3, MaxLimit: 12}, 3},
		{"limit at the default start and max", pause.Config{Limit: 8, MaxLimit: 12}, 8},
		{"limit equal to max", pause.Config{Limit: 32, MaxLimit: 32}, pause.DefaultLimit},
		{"limit alone", pause.Config{Limit: 5}, 5},
		{"max below the default start", pause.Config{MaxLimit: 2}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := pause.New(fakesandbox.NewNode(), tc.cfg)
			require.NoError(t, err)
			assert.Equal(t, tc.limit, p.Limit())
			require.NotNil(t, p.Estimator(), "a nil Config.Estimator means a default one")
			assert.Equal(t, time.Second, p.Estimator().Estimate(), "the default Estimator starts at 1 s")
		})
	}
}

// The zero Config adapts up to 32 at once, and retries a transient error
// with the default backoff (nil BackOff and Permanent fields are defaults,
// not errors).
func TestZeroConfigAdaptsAndRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 400, 10*time.Second)
		node.Add(&fakesandbox.Sandbox{Name: "flaky", Latency: time.Second, Faults: []fakesandbox.Fault{fakesandbox.Transient}})
		p, err := pause.New(node, pause.Config{})
		require.NoError(t, err)
		rep := p.Run(t.Context(), time.Time{})
		assert.Equal(t, 401, rep.Counts[pause.Preserved])
		assert.LessOrEqual(t, node.MaxInFlight(), 32)
		assert.Greater(t, node.MaxInFlight(), pause.DefaultLimit, "the limit adapted above its start")
		for _, e := range rep.Entries {
			if e.ID == "flaky" {
				assert.Equal(t, 2, e.Attempts)
			}
		}
	})
}

// A long Run logs a progress line every interval: done, left, time left.
func TestProgressIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		node := fakesandbox.NewNode()
		node.AddN("sb", 30, 2*time.Second)
		p, err := pause.New(node, pause.Config{Limit: 1, Logger: log, ProgressInterval: 15500 * time.Millisecond})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		rep := p.Run(ctx, time.Time{})
		require.Equal(t, 30, rep.Counts[pause.Preserved])
		var progress []string
		for line := range strings.Lines(buf.String()) {
			if strings.Contains(line, "pause: progress") {
				progress = append(progress, line)
			}
		}
		// Sandboxes finish at even seconds; the lines come in between.
		require.Len(t, progress, 3, "at 15.5, 31 and 46.5 s of a 60 s run")
		assert.Contains(t, progress[0], `msg="pause: progress: preserved 7/30, 0 failed, 59m45s to the preserve deadline"`)
		assert.Contains(t, progress[0], "preserved=7 failed=0 done=7 left=23 time_left=59m44.5s")
		assert.Contains(t, progress[1], "done=15 left=15 time_left=59m29s")
		assert.Contains(t, progress[2], "done=23 left=7 time_left=59m13.5s")
		assert.Contains(t, buf.String(), "pause: run finished")
	})
}

// The progress line counts failures apart, and once the phase deadline
// passed it says how long in-flight preserves have until the hard deadline.
func TestProgressCountsFailuresAndTheHardDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		node := fakesandbox.NewNode()
		sbs := node.AddN("sb", 10, 2*time.Second)
		sbs[0].Faults = []fakesandbox.Fault{fakesandbox.Permanent}
		sbs[1].Faults = []fakesandbox.Fault{fakesandbox.Permanent}
		p, err := pause.New(node, pause.Config{Limit: 1, Logger: slog.New(slog.NewTextHandler(&buf, nil)), ProgressInterval: 5500 * time.Millisecond})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 11*time.Second)
		defer cancel()
		rep := p.Run(ctx, time.Now().Add(15*time.Second))
		assert.Equal(t, 2, rep.Counts[pause.Failed])
		out := buf.String()
		// FIFO, one at a time, 2 s each: two failures, then preserves.
		assert.Contains(t, out, `msg="pause: progress: preserved 0/10, 2 failed, 5.5s to the preserve deadline"`)
		// At 11 s: preserved at 6, 8 and 10 s; the sixth started at 10 s, before the
		// deadline, and runs on to 12 s, inside the hard deadline at 15 s.
		assert.Contains(t, out, `msg="pause: progress: preserved 3/10, 2 failed, preserve deadline passed, in-flight preserves have 4s to the hard deadline"`)
	})
}

func TestProgressCanBeTurnedOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		node := fakesandbox.NewNode()
		node.AddN("sb", 30, 2*time.Second)
		p, err := pause.New(node, pause.Config{Limit: 1, ProgressInterval: -1, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		require.NoError(t, err)
		p.Run(t.Context(), time.Time{})
		assert.NotContains(t, buf.String(), "pause: progress")
	})
}

func TestFailuresAreLoggedAsWarnings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "bad", Faults: []fakesandbox.Fault{fakesandbox.Permanent}})
		p, err := pause.New(node, pause.Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		require.NoError(t, err)
		p.Run(t.Context(), time.Time{})
		assert.Contains(t, buf.String(), `level=WARN msg="pause: sandbox failed" sandbox=bad`)
	})
}

// Fault: a Config.BackOff that returns nil (an unset policy variable, a
// typed nil) passed New, and at SIGTERM the first transient error of a
// Preserve called Reset on it in a worker goroutine: a nil dereference
// that ended the process in the middle of the drain, every sandbox not yet
// preserved lost. New now makes one policy and fails naming the field; a
// BackOff that panics fails New the same way. docs/faults.md row 420.
func TestNewRejectsABackOffThatReturnsNil(t *testing.T) {
	var unset *backoff.ExponentialBackOff
	for name, tc := range map[string]struct {
		f    func() backoff.BackOff
		want string
	}{
		"nil":       {func() backoff.BackOff { return nil }, "pause: Config.BackOff must not return nil"},
		"typed nil": {func() backoff.BackOff { return unset }, "pause: Config.BackOff must not return nil"},
		"panics":    {func() backoff.BackOff { panic("no policy") }, "pause: Config.BackOff panicked: no policy"},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := pause.New(fakesandbox.NewNode(), pause.Config{BackOff: tc.f})
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	p, err := pause.New(fakesandbox.NewNode(), pause.Config{BackOff: func() backoff.BackOff { return &backoff.ZeroBackOff{} }})
	require.NoError(t, err, "a policy that is no pointer at all is fine")
	require.NotNil(t, p)
}

// Fault: row 420's check made one policy and looked only at whether it was
// nil. A policy that is not nil but panics when a Run uses it, a wrapper
// around a nil policy (backoff.WithMaxRetries or WithContext of an unset
// *backoff.ExponentialBackOff), passed New, and at SIGTERM a Preserve's
// first transient error called its Reset in a worker goroutine: the same
// nil dereference, the process ended mid-drain. New now uses the policy it
// makes as a Run does (Reset, then NextBackOff) and fails naming the
// field. docs/faults.md row 423.
func TestNewRejectsABackOffThatPanicsWhenUsed(t *testing.T) {
	var unset *backoff.ExponentialBackOff
	for name, f := range map[string]func() backoff.BackOff{
		"WithMaxRetries of nil": func() backoff.BackOff { return backoff.WithMaxRetries(unset, 3) },
		"WithContext of nil":    func() backoff.BackOff { return backoff.WithContext(unset, context.Background()) },
	} {
		t.Run(name, func(t *testing.T) {
			p, err := pause.New(fakesandbox.NewNode(), pause.Config{BackOff: f})
			require.Error(t, err, "New passed a policy whose Reset panics")
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), "pause: Config.BackOff panicked")
		})
	}
	p, err := pause.New(fakesandbox.NewNode(), pause.Config{BackOff: func() backoff.BackOff {
		return backoff.WithMaxRetries(backoff.NewExponentialBackOff(), 3)
	}})
	require.NoError(t, err, "a wrapped policy that works is fine")
	require.NotNil(t, p)
}

// codeError is the error a Preserve returns with an answer's status, the
// one a Permanent classifier is usually written for.
type codeError struct{ code int }

func (e *codeError) Error() string { return "status " + strconv.Itoa(e.code) }

// Fault: a Config.Permanent that panics, called on a worker goroutine
// with a Preserve's error, ended the process in the middle of a drain,
// every sandbox not yet preserved lost with no Report: a classifier
// written for the errors its author thought of (a type assertion), or
// reading a field that is nil for others. New now calls it with a plain
// error and fails naming the field when it panics there; one that panics
// only on some errors during a Run has them retried, as with no
// classifier, and the panic is logged at Error. docs/faults.md row 472.
func TestPermanentThatPanicsIsFoundAtNewOrRetried(t *testing.T) {
	p, err := pause.New(fakesandbox.NewNode(), pause.Config{Permanent: func(err error) bool {
		return err.(*codeError).code == 400 // holds for the errors of its author's server only
	}})
	require.Error(t, err, "New passed a classifier that panics on a plain error")
	assert.Nil(t, p)
	assert.Contains(t, err.Error(), "pause: Config.Permanent panicked on a plain error")

	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "flaky", Latency: time.Second, Faults: []fakesandbox.Fault{fakesandbox.Transient}},
			&fakesandbox.Sandbox{Name: "steady", Latency: time.Second})
		var answer map[error]*codeError // the answers seen, by error: none for a transient one
		p, err := pause.New(node, pause.Config{BackOff: constant(time.Second), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			Permanent: func(err error) bool {
				if errors.Is(err, fakesandbox.ErrTransient) {
					return answer[err].code == 400 // no answer: a nil dereference
				}
				return false
			}})
		require.NoError(t, err, "it does not panic on a plain error")
		rep, took := runFor(t, p, time.Minute, 0)
		flaky := entry(t, rep, "flaky")
		assert.Equal(t, pause.Preserved, flaky.Outcome, "retried, as with no classifier")
		assert.Equal(t, 2, flaky.Attempts)
		assert.Equal(t, pause.Preserved, entry(t, rep, "steady").Outcome)
		assert.Equal(t, 3*time.Second, took, "1 s, a 1 s wait, 1 s")
		assert.Contains(t, logs.String(), `level=ERROR msg="pause: Config.Permanent panicked`)
		assert.Contains(t, logs.String(), "invalid memory address or nil pointer dereference")
	})
}

// A cold Preserver's Limit says what a reserve may count on, not where its
// Run starts: 1 until a Run has measured a level, though the Run starts at
// 8; a Run that preserved nothing measured nothing; after one that did,
// the level it moved to. A fixed Limit is reported as set from the start.
func TestLimitCountsNoUnmeasuredParallelism(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		p, err := pause.New(node, pause.Config{})
		require.NoError(t, err)
		assert.Equal(t, 1, p.Limit(), "nothing measured")

		rep := p.Run(t.Context(), time.Time{})
		require.Empty(t, rep.Entries)
		assert.Equal(t, 1, p.Limit(), "a Run of no sandboxes measured nothing")

		node.AddN("sb", 8, time.Second)
		rep = p.Run(t.Context(), time.Time{})
		require.Equal(t, 8, rep.Counts[pause.Preserved])
		assert.Equal(t, pause.DefaultLimit, node.MaxInFlight(), "the Run started at the climb's start")
		assert.Equal(t, rep.Limit, p.Limit(), "a level measured: the one the Run moved to")
		assert.Greater(t, p.Limit(), 1)

		fixed, err := pause.New(node, pause.Config{Limit: 5})
		require.NoError(t, err)
		assert.Equal(t, 5, fixed.Limit(), "the operator's word")
	})
}
