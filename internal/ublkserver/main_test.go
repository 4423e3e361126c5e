package ublkserver

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/vmtest"
)

func TestMain(m *testing.M) {
	vmtest.MaybeInit()
	MaybeDaemon()
	goleak.VerifyTestMain(m)
}
