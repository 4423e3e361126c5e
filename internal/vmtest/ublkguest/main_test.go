package ublkguest

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/ublkserver"
	"github.com/drainkit/drainkit/internal/vmtest"
)

func TestMain(m *testing.M) {
	vmtest.MaybeInit()
	ublkserver.MaybeDaemon()
	MaybeHolder()
	MaybeIdle()
	goleak.VerifyTestMain(m)
}
