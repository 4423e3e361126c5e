package pid1test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/realpart"
)

// A command StartPID1 starts is PID 1 of its namespace, and Wait returns its exit status.
func TestStartPID1StartsPID1AndWaitReturnsItsStatus(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "a new PID namespace needs root (run the tests as root)")
	}
	var stdout bytes.Buffer
	cmd := exec.Command("sh", "-c", "echo $$; exit 3")
	cmd.Stdout = &stdout
	p := StartPID1(t, cmd)
	err := p.Wait(t, 30*time.Second, "sh did not exit")
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "%v", err)
	assert.Equal(t, 3, ee.ExitCode())
	assert.Equal(t, "1\n", stdout.String(), "sh's PID in its own namespace")
	assert.Equal(t, err, p.Wait(t, time.Second, "a second Wait"), "the same exit, again")
}
