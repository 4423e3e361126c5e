package hupquit

import (
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/logbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// SIGHUP and SIGQUIT, sent to the test process itself, do not end it while Handle is in
// place: SIGHUP is logged and ignored, SIGQUIT logs every goroutine's stack (the test's
// own among them); both lines name the program and say that SIGTERM stops it. stop ends
// Handle's goroutine (goleak checks it).
func TestHangupIsIgnoredAndQuitDumpsTheGoroutines(t *testing.T) {
	var logs logbuf.Buffer
	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	stop := Handle(slog.New(slog.NewTextHandler(&logs, nil)), "the worker")
	defer stop()

	require.NoError(t, self.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "SIGHUP ignored") },
		10*time.Second, 5*time.Millisecond, "SIGHUP's line: %s", &logs)
	assert.Contains(t, logs.String(),
		`level=WARN msg="SIGHUP ignored: the worker has nothing to reload; SIGTERM stops it"`)

	require.NoError(t, self.Signal(syscall.SIGQUIT))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "goroutine dump") },
		10*time.Second, 5*time.Millisecond, "SIGQUIT's dump: %s", &logs)
	assert.Contains(t, logs.String(),
		`level=WARN msg="SIGQUIT: goroutine dump; the worker goes on (SIGTERM stops it)" goroutines=`)
	assert.Contains(t, logs.String(), "TestHangupIsIgnoredAndQuitDumpsTheGoroutines",
		"the dump holds every goroutine's stack, the test's own")
}
