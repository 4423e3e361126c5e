package kubeletsimtest

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/kubeletsim"
)

// Start starts cmd with kubeletsim.Start, in a container of its own, and
// fails t if it does not start. t's cleanup SIGKILLs the container and waits for
// the child's exit: a test that terminated it already finds it gone.
func Start(t testing.TB, cmd *exec.Cmd) *kubeletsim.Child {
	t.Helper()
	child, err := kubeletsim.Start(cmd)
	require.NoError(t, err)
	t.Cleanup(func() { _ = child.Kill(); <-child.Exited() })
	return child
}
