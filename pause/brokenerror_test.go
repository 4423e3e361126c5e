package pause_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// statusError is a server's error as a client returns it: its answer's
// status, and the transport's error under it.
type statusError struct {
	code int
	err  error
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d: %v", e.code, e.err) }
func (e *statusError) Unwrap() error { return e.err }

// pauseCall is what a client's pause returns: a nil *statusError when the
// server answered 200, which in an error is not a nil error (Go's FAQ,
// "Why is my nil error value not equal to nil?").
func pauseCall(code int) *statusError {
	if code != 200 {
		return &statusError{code: code}
	}
	return nil
}

// typedNilSandbox returns its client's *statusError as its error: a nil
// one, not nil as an error, when the server answered 200.
type typedNilSandbox struct{ id string }

func (s typedNilSandbox) ID() string                         { return s.id }
func (s typedNilSandbox) Preserve(ctx context.Context) error { return pauseCall(200) }

// A Preserve that returns a typed nil error is a sandbox failed, at once,
// the others preserved beside it; its error's methods, which dereference
// the nil, are not called. It ended the process before (errors.Is called
// its Unwrap on the worker), with every sandbox not yet preserved.
//
//	0 s  sb-0..2 and typed-nil start (limit 8)
//	0 s  typed-nil: Failed, one attempt, its entry names the typed nil
//	1 s  sb-0..2 preserved; Run returns
func TestPreserveReturningATypedNilErrorIsFailedNotACrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 3, time.Second)
		lister := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			list, err := node.List(ctx)
			return append(list, typedNilSandbox{"typed-nil"}), err
		})
		p, err := pause.New(lister, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, took := runFor(t, p, time.Minute, 0)
		assert.Equal(t, time.Second, took)
		assert.Equal(t, 3, rep.Counts[pause.Preserved])
		e := entry(t, rep, "typed-nil")
		assert.Equal(t, pause.Failed, e.Outcome, "not known to be preserved")
		assert.Equal(t, 1, e.Attempts, "not retried: a retry returns the same")
		assert.Contains(t, e.Error, "returned a nil *pause_test.statusError as its error")
		assert.Empty(t, e.Stack, "no panic")
		require.Error(t, rep.Err())
		assert.Contains(t, rep.Err().Error(), "1 of 4 sandboxes not preserved")
	})
}

// A Lister that returns a typed nil error with its sandboxes gave a
// listing that failed after them: they are preserved, the Report is
// Incomplete and says why, and the listing is not retried (it would say
// the same). It ended the process before (errors.Is called the
// error's Unwrap on Run's goroutine), preserving nothing.
func TestListerReturningATypedNilErrorGivesAnIncompleteListingNotACrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 3, time.Second)
		var calls atomic.Int32
		lister := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			calls.Add(1)
			list, _ := node.List(ctx)
			return list, pauseCall(200)
		})
		p, err := pause.New(lister, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, took := runFor(t, p, time.Minute, 0)
		assert.Equal(t, time.Second, took)
		assert.Equal(t, int32(2), calls.Load(), "the pass's listing and the one after it, as after any pass; neither retried")
		assert.Equal(t, 3, rep.Counts[pause.Preserved])
		assert.True(t, rep.Incomplete)
		assert.Contains(t, rep.ListErr, "the Lister returned a nil *pause_test.statusError as its error")
	})
}

// answerError is a client's error for a pause the server answered with a
// failure status; the client returns it with no answer, too, when the
// request failed before one came: its Error then reads a field of nil.
type answerError struct{ answer *http.Response }

func (e *answerError) Error() string { return "pause refused: " + e.answer.Status }

// noAnswerSandbox's client lost its connection before the answer.
type noAnswerSandbox struct{ id string }

func (s noAnswerSandbox) ID() string                     { return s.id }
func (s noAnswerSandbox) Preserve(context.Context) error { return &answerError{} }

// A Preserve whose error's Error panics (reading the answer that never
// came) is a sandbox failed, as a Preserve that panics is, with the stack:
// the others are preserved beside it. It ended the process before, when
// the Report's entry was written on the worker.
//
//	0 s  sb-0..2 and no-answer start (limit 8)
//	0 s  no-answer: Failed, one attempt, its error's type named, a stack
//	1 s  sb-0..2 preserved; Run returns
func TestPreserveReturningAnErrorWhoseErrorPanicsIsFailedNotACrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 3, time.Second)
		lister := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			list, err := node.List(ctx)
			return append(list, noAnswerSandbox{"no-answer"}), err
		})
		p, err := pause.New(lister, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, took := runFor(t, p, time.Minute, 0)
		assert.Equal(t, time.Second, took)
		assert.Equal(t, 3, rep.Counts[pause.Preserved])
		e := entry(t, rep, "no-answer")
		assert.Equal(t, pause.Failed, e.Outcome)
		assert.Equal(t, 1, e.Attempts, "a panic is not retried")
		assert.Contains(t, e.Error, "returned an error (*pause_test.answerError) whose Error or Unwrap panicked")
		assert.Contains(t, e.Stack, "answerError", "the stack shows where")
	})
}

// A Lister whose error's Error panics gave a failed listing, as a Lister
// that panics does, with the sandboxes it returned kept: they are
// preserved, and the listing after their pass succeeds. It ended the
// process before, when Run's goroutine read the error.
//
//	0 s  listing: sb-0..2, and an error whose Error panics
//	1 s  sb-0..2 preserved; listing again: none left; Run returns
func TestListerReturningAnErrorWhoseErrorPanicsIsAFailedListingNotACrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 3, time.Second)
		var calls atomic.Int32
		lister := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			list, err := node.List(ctx)
			if calls.Add(1) == 1 {
				return list, &answerError{}
			}
			return list, err
		})
		p, err := pause.New(lister, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, took := runFor(t, p, time.Minute, 0)
		assert.Equal(t, time.Second, took)
		assert.Equal(t, int32(2), calls.Load())
		assert.Equal(t, 3, rep.Counts[pause.Preserved])
		assert.Contains(t, rep.ListErr, "the Lister returned an error (*pause_test.answerError) whose Error or Unwrap panicked")
		assert.False(t, rep.Incomplete, "the listing after the pass succeeded")
		assert.NoError(t, rep.Err())
	})
}
