package drain

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// stat is a /proc/self/stat line of a process that started ticks clock
// ticks after boot (field 22), with a command name holding a space and ")".
func stat(ticks int64) string {
	fields := make([]string, 20) // fields 3..22
	for i := range fields {
		fields[i] = "0"
	}
	fields[0], fields[19] = "S", strconv.FormatInt(ticks, 10)
	return "4242 (drain hook)) " + strings.Join(fields, " ") + " 0 0\n"
}

// Fault (a fresh-eyes review): the start time, ticks x 1 s / 100, was
// computed as ticks x 10^9 first, which wraps round past 9.2 x 10^9 ticks:
// on a node up for more than 2.92 years every exec hook fell back to
// time.Now(), and its start-up counted as drain time.
func TestProcessStartOnANodeUpForYears(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	for _, up := range []time.Duration{time.Hour, 3 * 365 * 24 * time.Hour, 50 * 365 * 24 * time.Hour} {
		boot := now.Add(-up)
		procStat := fmt.Sprintf("cpu  1 2 3\nbtime %d\nprocesses 7\n", boot.Unix())
		started := now.Add(-1500 * time.Millisecond) // the hook's start-up took 1.5 s
		ticks := int64(started.Sub(boot) / (10 * time.Millisecond))
		assert.Equal(t, started, processStart(stat(ticks), procStat, now), "up %v", up)
	}
	assert.Equal(t, now, processStart("garbage", "btime 1\n", now), "unreadable: now")
}
