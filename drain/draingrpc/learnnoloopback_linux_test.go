package draingrpc

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
)

// Fault: a learning of grpc's key that found no loopback to serve its RPC
// on (a network namespace whose lo is down, a sandbox that forbids
// listen) returned without stopping the grpc.Server it had made, which
// the process-wide server options had given theirs: with grpc's
// NumStreamWorkers, that server's workers ran for the process's life, as
// did its entry in channelz where channelz is on.
//
//	every server           grpc.NumStreamWorkers(8) (grpc's AddGlobalServerOptions)
//	a thread               in a network namespace of its own, lo down
//	learning the key       there: no loopback, no key; before, 8 of the
//	                       learner's server's goroutines run on; after, none
//
// It runs in a process of its own: the option is the process's.
func TestALearningWithNoLoopbackLeavesNoServerRunning(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	withGlobalServerOptions(t, grpc.NumStreamWorkers(8))
	running := goleak.IgnoreCurrent()

	why, err := onThreadOfItsOwn(func() (string, error) {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil { // lo down, as a namespace starts
			return "", err
		}
		key, why := learnServerKey(origin{authority: "localhost"}, learningBound)
		if key != nil {
			return "", errors.New("a key learned with no loopback up")
		}
		return why, nil
	})
	if errors.Is(err, unix.EPERM) {
		t.Skip("no network namespace of its own here:", err)
	}
	require.NoError(t, err)
	require.Contains(t, why, "found no loopback")
	goleak.VerifyNone(t, running)
}
