//go:build !linux

package drain

import "time"

// ProcessStart returns when the current process started; outside Linux it
// returns time.Now(). An exec preStop hook passes it as ExecHook.Start.
func ProcessStart() time.Time { return time.Now() }
