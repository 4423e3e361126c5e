package ublk_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/loopdev"
)

func TestMain(m *testing.M) {
	fakeublk.MainIfDaemon()
	loopdev.MainIfHolder() // the "VMM" holding a disk (loopdev.Hold)
	goleak.VerifyTestMain(m)
}
