package drain

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// procStartEnv makes the test binary print its ProcessStart and exit.
const procStartEnv = "DRAIN_TEST_PROCESS_START"

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
		started := up - 1500*time.Millisecond // the hook's start-up took 1.5 s
		ticks := int64(started / (10 * time.Millisecond))
		assert.Equal(t, now.Add(-1500*time.Millisecond), processStart(stat(ticks), up, now), "up %v", up)
	}
	assert.Equal(t, now, processStart("garbage", time.Hour, now), "unreadable: now")
	assert.Equal(t, now, processStart(stat(1000), time.Second, now), "started after now: now")
}

// Fault (a new user's review): the start was counted from /proc/stat's
// btime, the boot time in whole seconds, and came up to a second early
// (0.79-0.81 s on one node, every time): an exec hook's T0 was set before
// the kubelet started it. Counted against the time since boot, a child
// process's start is within the 10 ms of its ticks of when it was started.
func TestProcessStartOfAChildIsWhenItWasStarted(t *testing.T) {
	if os.Getenv(procStartEnv) != "" {
		fmt.Println(ProcessStart().UnixNano())
		os.Exit(0)
	}
	before := time.Now()
	out, err := childCmd(os.Args[0], "-test.run=^TestProcessStartOfAChildIsWhenItWasStarted$").Output()
	after := time.Now()
	require.NoError(t, err)
	ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	require.NoError(t, err, "%q", out)
	start := time.Unix(0, ns)
	assert.False(t, start.Before(before.Add(-20*time.Millisecond)), "%v before it was started", before.Sub(start))
	assert.False(t, start.After(after), "after it ended")
}

// childCmd is the test binary run with procStartEnv set.
func childCmd(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), procStartEnv+"=1")
	return cmd
}

// A thread preempted between the reading of the time and of the time since
// boot (a loaded node) put the gap into the start's age: the start came out
// 39.7 ms early in a race run. The two are read as one moment: of three
// tries, the one with the least between its boot readings.
func TestUptimeAndTimeAreReadAsOneMoment(t *testing.T) {
	base := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	var boot time.Duration = time.Hour
	reads := []time.Duration{
		0, 30 * time.Millisecond, // first try: preempted 30 ms after the time was read
		0, 50 * time.Microsecond, // second: one moment
	}
	clock := func() (time.Duration, error) {
		boot += reads[0]
		reads = reads[1:]
		return boot, nil
	}
	var nows int
	now := func() time.Time { nows++; return base.Add(boot - time.Hour) }
	up, at, err := upAt(clock, now)
	require.NoError(t, err)
	assert.Equal(t, 2, nows, "a second try, then no more: its gap is under a millisecond")
	assert.Equal(t, base.Add(30*time.Millisecond), at, "the second try's time")
	assert.Equal(t, time.Hour+30*time.Millisecond+50*time.Microsecond, up, "with its later boot reading: the start 50 µs early, not 30 ms")

	failing := func() (time.Duration, error) { return 0, errors.New("no CLOCK_BOOTTIME") }
	_, _, err = upAt(failing, time.Now)
	assert.ErrorContains(t, err, "CLOCK_BOOTTIME")
}
