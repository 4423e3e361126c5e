package ublkstep_test

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/ublkstep"
	"github.com/drainkit/drainkit/ublk"
)

// The step of a server whose -grace is an hour reserves a tenth of the
// grace in use: 30 s, then the 3 s of a 30 s deletion, which its Stop
// lays its stages out from.
func ExampleNew() {
	budget, err := deadline.New(time.Hour, deadline.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	stepReserve := func(grace time.Duration) time.Duration {
		return min(max(grace/10, 500*time.Millisecond), 30*time.Second)
	}
	var daemon ublk.Daemon // none here: the step only waits for the devices
	logger := slog.New(slog.DiscardHandler)
	td, err := ublkstep.New(daemon, ublk.Config{Logger: logger}, func() time.Duration {
		return stepReserve(budget.GraceInUse())
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	steps := []drain.Step{td} // drain.Config.Steps
	fmt.Println(steps[0].Phase().Name, steps[0].Phase().Reserve())
	now := time.Now()
	budget.OnSIGTERM(now)
	budget.Tighten(now.Add(30 * time.Second)) // the pod's deletion, read at SIGTERM
	fmt.Println(steps[0].Phase().Name, steps[0].Phase().Reserve())
	// Output:
	// ublk 30s
	// ublk 3s
}
