package usererr_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/usererr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// answerError reads the answer it was made from: made for none, its Error
// panics.
type answerError struct{ answer *struct{ status string } }

func (e *answerError) Error() string { return "server said " + e.answer.status }

type unwrapPanics struct{}

func (unwrapPanics) Error() string { return "fine" }
func (unwrapPanics) Unwrap() error { panic("unwrap read nothing") }

func TestIsNilFindsATypedNilBehindAnInterface(t *testing.T) {
	var nilErr *answerError
	var err error = nilErr
	assert.True(t, usererr.IsNil(nil))
	assert.True(t, usererr.IsNil(err), "a nil *T as an error is not a nil error, and is nil")
	assert.True(t, usererr.IsNil((map[string]int)(nil)))
	assert.False(t, usererr.IsNil(errors.New("x")))
	assert.False(t, usererr.IsNil(unwrapPanics{}), "a struct value is never nil")
}

func TestPanicsSaysWhatAnErrorsMethodsPanickedWith(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		panic bool
		where string // a frame the stack shows
	}{
		{"an Error that reads no answer", &answerError{}, true, "answerError"},
		{"an Unwrap that panics", unwrapPanics{}, true, "unwrapPanics"},
		{"a plain error", errors.New("refused"), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, stack := usererr.Panics(tc.err)
			if !tc.panic {
				assert.Nil(t, v)
				assert.Nil(t, stack)
				return
			}
			assert.NotNil(t, v)
			assert.True(t, strings.Contains(string(stack), tc.where), "the stack shows %s:\n%s", tc.where, stack)
		})
	}
}
