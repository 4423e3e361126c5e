package servingtest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// DrainedAtOnce checks what a server with one running sandbox returned after the test
// closed its listener at closed, drained by nothing else: err, the one that makes its Main
// exit 1, says stopped ("serving the API stopped"); rep preserved the sandbox, its budget
// anchored no earlier than closed, and its Cause says stopped too; and log, the server's text log, has stopped at Error
// before the drain's "drain: shutdown finished".
func DrainedAtOnce(t *testing.T, rep *drain.Report, err error, log string, closed time.Time, stopped string) {
	t.Helper()
	require.Error(t, err, "Main exits 1")
	assert.Contains(t, err.Error(), stopped)
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Preserved], "drained at once: the sandbox preserved")
	assert.False(t, rep.Budget.Start.Before(closed), "the budget anchored when serving stopped, as at SIGTERM: %v", rep.Budget.Start)
	assert.Contains(t, rep.Cause, stopped, "the Report says what began the drain")
	at := strings.Index(log, "level=ERROR msg=\""+stopped)
	require.GreaterOrEqual(t, at, 0, "logged at ERROR:\n%s", log)
	assert.Less(t, at, strings.Index(log, "drain: shutdown finished"), "logged when it stopped, before the drain:\n%s", log)
}
