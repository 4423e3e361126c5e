package pause

import (
	"runtime"
	"testing"
	"time"
)

// A poke that finds a wake pending sends none: the Run goroutine, woken
// by the earlier one, looks after both. So what a poker wrote before its
// poke is seen once the Run goroutine has taken the wake that was
// pending: a listing's answer, a preserve settled, room below the limit.
// Left to a send on a full channel to say a wake was pending, it was not:
// a send that fails is no synchronization under the Go memory model (the
// runtime reads the channel's count for it without a lock, a load that
// arm64 may perform before the poker's own update is seen), and the Run
// goroutine could look before the update and wait again with no wake to
// come (docs/faults.md row 3501). The race detector checks the model,
// not the machine: under -race it reported the read below racing with
// the poker's write, on amd64 too.
//
//	a worker pokes: a wake pending
//	a listing's call writes its answer and pokes: the wake is pending already
//	the Run goroutine takes the wake, then reads the answer
func TestWhatAPokerWroteIsSeenOnceThePendingWakeIsTaken(t *testing.T) {
	r := &run{wake: make(chan struct{}, 1)}
	r.poke()
	var answer []Sandbox // no atomic of its own: what orders it is the poke
	others := runtime.NumGoroutine()
	go func() {
		answer = []Sandbox{sizeNoop("sb-0")}
		r.poke()
	}()
	// Nothing may order the goroutine's steps before the read but its
	// poke: its end is seen in the count of goroutines alone.
	for giveUp := time.Now().Add(time.Minute); runtime.NumGoroutine() > others; runtime.Gosched() {
		if time.Now().After(giveUp) {
			t.Fatal("the poking goroutine had not ended after a minute")
		}
	}
	<-r.wake
	r.woken()
	if len(answer) != 1 {
		t.Fatalf("the Run goroutine, woken, read %d sandboxes of the answer written before the poke, want 1", len(answer))
	}
	select {
	case <-r.wake:
		t.Error("two pokes while a wake was pending made two wakes")
	default:
	}
	r.poke() // a poke after the wake was taken is a wake of its own
	select {
	case <-r.wake:
	default:
		t.Error("a poke after the pending wake was taken made no wake")
	}
}
