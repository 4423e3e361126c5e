package early

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) != "" {
		os.Exit(consumer())
	}
	goleak.VerifyTestMain(m)
}
