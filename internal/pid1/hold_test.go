package pid1_test

import (
	"io"
	"os"
)

// HoldPID1Env names a FIFO on which PID 1 of the test binary is held once every package
// of the binary but this one has been initialised, and before main: this package imports
// pid1, so pid1's own initialisation has run. The test opens the FIFO for writing (which
// returns once PID 1 is held), signals PID 1 and closes the FIFO to let it go on. It is a
// server's start before main on a loaded node: its Go runtime handles signals, and its
// packages' inits take tens of milliseconds.
const HoldPID1Env = "PID1_TEST_HOLD_PID1"

func init() {
	if fifo := os.Getenv(HoldPID1Env); fifo != "" && os.Getpid() == 1 {
		if f, err := os.Open(fifo); err == nil {
			_, _ = io.Copy(io.Discard, f) // until the test closes its end
			_ = f.Close()
		}
	}
}
