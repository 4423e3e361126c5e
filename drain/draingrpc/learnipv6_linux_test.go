package draingrpc

import (
	"errors"
	"fmt"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Fault: a learning of grpc's key whose network namespace has ::1 alone on
// its loopback (an IPv6-only pod whose lo has no 127.0.0.1) found no
// loopback to serve its RPC on: it listened on 127.0.0.1 only, which fails
// there ("cannot assign requested address"), so the key was never
// learned, row 3443's WARN said so, and every held Stop told its RPCs by
// the socket tables (row 2580's weaker sign).
//
//	a thread               in a network namespace of its own, lo up, 127.0.0.1 removed from it: ::1 alone
//	learning the key       there: before, "found no loopback"; after, learned on [::1]
func TestALearningOnALoopbackWithIPv6AloneLearnsTheKey(t *testing.T) {
	type learned struct {
		key any
		why string
	}
	l, err := onThreadOfItsOwn(func() (learned, error) {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return learned{}, err
		}
		// Forked from this thread, ip runs in the namespace.
		for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "del", "127.0.0.1/8", "dev", "lo"}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return learned{}, fmt.Errorf("ip %v: %w: %s", args, err, out)
			}
		}
		key, why := learnServerKey(origin{authority: "localhost"}, learningBound)
		return learned{key, why}, nil
	})
	if errors.Is(err, unix.EPERM) {
		t.Skip("no network namespace of its own here:", err)
	}
	require.NoError(t, err)
	require.NotNil(t, l.key, "grpc's key, learned on ::1: %s", l.why)
}
