package drain

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestProcessStartIsWhenThisProcessStarted(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	start := ProcessStart()
	now := time.Now()
	// The test binary has been running for more than a millisecond by now;
	// the fallback, time.Now(), would be within microseconds of now.
	assert.Greater(t, now.Sub(start), time.Millisecond)
	assert.Less(t, now.Sub(start), time.Hour)
}
