package blockdev_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/loopdev"
)

func TestMain(m *testing.M) {
	loopdev.MainIfHolder() // the "VMM" of the holders tests (loopdev.Hold)
	goleak.VerifyTestMain(m)
}
