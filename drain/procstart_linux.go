package drain

import (
	"cmp"
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
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return time.Now()
	}
	up, now, err := upAt(bootTime, time.Now)
	if err != nil {
		return now
	}
	return processStart(string(stat), up, now)
}

// bootTime is the time since boot, CLOCK_BOOTTIME.
func bootTime() (time.Duration, error) {
	var ts unix.Timespec
	err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return time.Duration(ts.Nano()), err
}

// upAt reads the time since boot (boot) and the time (now) as one moment:
// a thread preempted between two clock readings (a loaded node, where
// preStop hooks run) puts tens of milliseconds between them, which the
// start's age would gain. It reads boot on both sides of now and keeps, of
// three tries, the pair whose two boot readings are closest, with the
// later one: what gap is left puts the start early, never late (a start
// late would give the drain time the hook's start-up already spent).
func upAt(boot func() (time.Duration, error), now func() time.Time) (up time.Duration, at time.Time, err error) {
	gap := time.Duration(math.MaxInt64)
	for range 3 {
		before, err := boot()
		t := now()
		after, err2 := boot()
		if err != nil || err2 != nil {
			return 0, t, cmp.Or(err, err2)
		}
		if after-before < gap {
			gap, up, at = after-before, after, t
		}
		if gap < time.Millisecond {
			break
		}
	}
	return up, at, nil
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
