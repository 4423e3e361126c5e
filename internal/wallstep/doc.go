// Package wallstep makes a time.Time as it was read while the node's wall
// clock stood off from where it stands now: the same monotonic reading,
// another wall clock reading. Tests show with it what a step of the clock
// (NTP, a VM resumed) does to code that must keep the two apart, such as
// a budget's times, compared on the monotonic clock, against a
// deletionTimestamp or a JSON answer, which have only the wall clock:
// package time has no way to make such a reading short of stepping the
// node's clock.
//
//	t0, err := wallstep.Stepped(time.Now(), -2*time.Second) // read while the clock was 2 s slow
//
// Stepped sets the wall clock seconds of time.Time's unexported fields
// (the layout Go has kept since 1.9) and checks what it made: a Go whose
// layout changed gets an error, not a time that is wrong.
package wallstep
