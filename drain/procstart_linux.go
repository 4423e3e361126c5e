package drain

import (
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/drainkit/drainkit/internal/procstat"
)

// ProcessStart returns when the current process started, read from
// /proc/self/stat (10 ms resolution), or time.Now() if that fails. An exec
// preStop hook passes it as ExecHook.Start: the kubelet started the hook
// (T0) just before, and the hook's own start-up must not count as drain
// time.
func ProcessStart() time.Time {
	now := time.Now()
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return now
	}
	procStat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return now
	}
	return processStart(string(stat), string(procStat), now)
}

// processStart is ProcessStart over the contents of /proc/self/stat and
// /proc/stat, at now.
func processStart(stat, procStat string, now time.Time) time.Time {
	st, err := procstat.Parse([]byte(stat))
	if err != nil || st.StartTime > math.MaxInt64 {
		return now
	}
	ticks := int64(st.StartTime)
	boot, ok := bootTime(procStat)
	if !ok {
		return now
	}
	const clockTicks = 100 // USER_HZ: 100 on every Linux architecture Go supports
	// Whole seconds first: ticks x 10^9 wraps round past 9.2 x 10^9 ticks
	// (a node up for 2.92 years).
	start := boot.Add(time.Duration(ticks/clockTicks)*time.Second + time.Duration(ticks%clockTicks)*(time.Second/clockTicks))
	if start.After(now) || now.Sub(start) > time.Hour {
		return now
	}
	return start
}

func bootTime(procStat string) (time.Time, bool) {
	for line := range strings.Lines(procStat) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Unix(secs, 0), err == nil
		}
	}
	return time.Time{}, false
}
