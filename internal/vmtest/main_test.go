package vmtest

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	MaybeInit()
	goleak.VerifyTestMain(m)
}
