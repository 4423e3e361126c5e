package escalate_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if runHelperProcess() {
		return
	}
	goleak.VerifyTestMain(m)
}
