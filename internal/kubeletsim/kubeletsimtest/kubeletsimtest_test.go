package kubeletsimtest_test

import (
	"os/exec"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/kubeletsim/kubeletsimtest"
	"github.com/drainkit/drainkit/internal/realpart"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The cleanup SIGKILLs a child the test left running and reaps it before the test
// ends: no process and no reaping goroutine outlive it (goleak checks the latter).
func TestCleanupKillsAndReapsAChildLeftRunning(t *testing.T) {
	needsPIDNamespace(t) // or the subtest skips, with no child
	var child *kubeletsim.Child
	t.Run("a test that leaves its child running", func(t *testing.T) {
		child = kubeletsimtest.Start(t, exec.Command("sleep", "300"))
	})
	select {
	case <-child.Exited():
	default:
		t.Fatal("the child was not reaped by the cleanup")
	}
	var exit *exec.ExitError
	require.ErrorAs(t, child.Err(), &exit)
	assert.Equal(t, "signal: killed", exit.Error())
}

// A command that does not start fails the test that asked for it.
func TestACommandThatDoesNotStartFailsTheTest(t *testing.T) {
	needsPIDNamespace(t) // or Start skips, in the goroutine, before the start
	failed := false
	done := make(chan struct{})
	go func() { // require's FailNow ends the goroutine, as it ends a test's
		defer close(done)
		r := &recorder{T: t, failed: &failed}
		kubeletsimtest.Start(r, exec.Command("/nonexistent/server"))
	}()
	<-done
	assert.True(t, failed)
}

// needsPIDNamespace skips t where Start would skip the test it is given, saying
// why (failed under CI=true).
func needsPIDNamespace(t *testing.T) {
	t.Helper()
	if err := kubeletsim.PIDNamespace(); err != nil {
		realpart.Missing(t, err.Error())
	}
}

// recorder is a testing.TB whose failures are recorded, not the test's.
type recorder struct {
	*testing.T
	failed *bool
}

func (r *recorder) Errorf(string, ...any) { *r.failed = true }
func (r *recorder) FailNow()              { *r.failed = true; runtime.Goexit() }
