package kubeletsimtest

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/realpart"
)

// Start starts cmd with kubeletsim.Start, in a container of its own, as
// PID 1 of its PID namespace, and fails t if it does not start. Where this
// machine gives a child no PID namespace of its own (kubeletsim.PIDNamespace:
// not root) it skips t, saying why, or fails it under CI=true: a test of a
// plain child would pass what a pod's PID 1 fails. t's cleanup SIGKILLs the
// container and waits for the child's exit: a test that terminated it
// already finds it gone.
func Start(t testing.TB, cmd *exec.Cmd) *kubeletsim.Child {
	t.Helper()
	if err := kubeletsim.PIDNamespace(); err != nil {
		realpart.Missing(t, err.Error())
	}
	child, err := kubeletsim.Start(cmd)
	require.NoError(t, err)
	t.Cleanup(func() { _ = child.Kill(); <-child.Exited() })
	return child
}
