package deadline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
)

// Fault: a nil Option panicked in New, and WithLogger(nil) was accepted
// where pause.WithLogger(nil) is not. Both fail at construction, naming
// what is wrong, in New and in FromKillTime.
func TestNilOptionAndNilLoggerFailAtConstruction(t *testing.T) {
	for name, opts := range map[string][]deadline.Option{
		"option 2 is nil":    {deadline.WithMargin(time.Second), nil},
		"logger must not be": {deadline.WithLogger(nil)},
	} {
		b, err := deadline.New(time.Minute, opts...)
		require.Error(t, err, name)
		assert.Nil(t, b)
		assert.Contains(t, err.Error(), name)
		b, err = deadline.FromKillTime(time.Now().Add(time.Minute), opts...)
		require.Error(t, err, name)
		assert.Nil(t, b)
		assert.Contains(t, err.Error(), name)
	}
}
