package drain

import (
	"math"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/procstat"
)

// ProcessStart returns when the current process started, read from
// /proc/self/stat (10 ms resolution) against the time since boot
// (CLOCK_BOOTTIME, the clock that field counts on), or time.Now() if that
// fails. An exec preStop hook passes it as ExecHook.Start: the kubelet
// started the hook (T0) just before, and the hook's own start-up must not
// count as drain time.
func ProcessStart() time.Time {
	now := time.Now()
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return now
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return now
	}
	return processStart(string(stat), time.Duration(ts.Nano()), now)
}

// processStart is ProcessStart over the contents of /proc/self/stat, up
// (the time since boot) at now. Not /proc/stat's btime: it is in whole
// seconds, and put every start up to a second early (0.79 s on one node).
func processStart(stat string, up time.Duration, now time.Time) time.Time {
	st, err := procstat.Parse([]byte(stat))
	if err != nil || st.StartTime > math.MaxInt64 {
		return now
	}
	ticks := int64(st.StartTime)
	const clockTicks = 100 // USER_HZ: 100 on every Linux architecture Go supports
	// Whole seconds first: ticks x 10^9 wraps round past 9.2 x 10^9 ticks
	// (a node up for 2.92 years).
	since := time.Duration(ticks/clockTicks)*time.Second + time.Duration(ticks%clockTicks)*(time.Second/clockTicks)
	age := up - since
	if age < 0 || age > time.Hour {
		return now
	}
	return now.Add(-age)
}
