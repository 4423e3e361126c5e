package bounded

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stops are the stretches of wall time, from the end of the contexts
// both waits follow, in which their process did not run (a CFS throttle,
// a SIGSTOP, a loaded node's scheduler): a goroutine whose timer fires
// inside one sees it at its end.
type stops [][2]time.Duration

// resume sleeps, from start, until the process runs again: to the end of
// the stop now falls in, if any.
func (ss stops) resume(start time.Time) {
	for _, s := range ss {
		if now := time.Since(start); now >= s[0] && now < s[1] {
			time.Sleep(s[1] - now)
		}
	}
}

// randomStops lays out stops a loaded node and a container at its CPU
// quota give a process (up to 24 in the first 3 s, each at most 150 ms:
// a CFS period and a late thaw), and with one chance in two a freeze
// outlasting both slacks' wall bounds (1.1 s to 2.5 s), after which the
// process runs for at least the outer slack before its next stop.
func randomStops(r *rand.Rand, outer time.Duration) stops {
	var ss stops
	at := time.Duration(r.Int64N(int64(20 * time.Millisecond)))
	freezeAt := -1
	if r.IntN(2) == 0 {
		freezeAt = r.IntN(6)
	}
	for i := range r.IntN(25) {
		d := time.Millisecond + time.Duration(r.Int64N(int64(150*time.Millisecond)))
		gap := time.Duration(r.Int64N(int64(200 * time.Millisecond)))
		if i == freezeAt {
			d = 1100*time.Millisecond + time.Duration(r.Int64N(int64(1400*time.Millisecond)))
			gap += outer
		}
		ss = append(ss, [2]time.Duration{at, at + d})
		at += d + gap
	}
	return ss
}

// resultReturn is how long, running, the inner wait's result takes to
// reach the outer one once the inner one gave up: pause's Run settles the
// Report and returns it, and bounded.Call's goroutine sends it.
const resultReturn = 100 * time.Microsecond

// returnResult takes resultReturn of the process's running time, from
// when it runs again.
func returnResult(ss stops, start time.Time) {
	ss.resume(start)
	time.Sleep(resultReturn)
	ss.resume(start)
}

// waitOut runs a slack of d the way Within does, in a process stopped by
// ss from start: each stretch's end is seen once the process runs. It
// returns whether got delivered before the slack gave up (a value ready
// then still wins), and when it gave up or got it.
func waitOut(d time.Duration, ss stops, start time.Time, got <-chan struct{}) (bool, time.Time) {
	s := NewSlack(d)
	defer s.Stop()
	for {
		select {
		case <-got:
			return true, time.Now()
		case <-s.C():
			ss.resume(start)
			if s.Spent() {
				_, ok := ready(got)
				return ok, time.Now()
			}
		}
	}
}

// A wait inside another (pause's 20 ms inside drain's 100 ms for the
// Preserver; draingrpc's 50 ms and ublk's 20 ms reads inside a step's
// 100 ms) must give up first, whatever stops its process takes, so that
// the outer one gets what the inner one settled (a Report with every
// sandbox) rather than abandoning it. Both see the contexts end after
// the same stop; the inner one starts up to 5 ms later (its goroutine
// woken after the outer's), and its result takes resultReturn to reach
// the outer one. The stops: CFS periods and late thaws, and at most one
// freeze that outlasts both wall bounds, after which the process runs
// for the outer slack (a second stop covering both waits' last stretches
// ends them at one wake, which no slack can order: see the package's
// doc).
//
//	contexts end ─┬─ outer slack (100 ms of stretches seen on time; at most 1.4 s, then the rest of it)
//	              └─ inner slack (20 ms ...; at most 1.08 s, then the rest) ─► its result ─► outer has it
func TestAWaitInsideOneWithALongerSlackGivesUpFirstThroughThrottlesAndAFreeze(t *testing.T) {
	pairs := [][2]time.Duration{
		{20 * time.Millisecond, 100 * time.Millisecond},
		{50 * time.Millisecond, 100 * time.Millisecond},
	}
	r := rand.New(rand.NewPCG(3320, 1))
	for i := range 400 {
		pair := pairs[i%len(pairs)]
		ss := randomStops(r, pair[1])
		lag := time.Duration(r.Int64N(int64(5 * time.Millisecond)))
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				ss.resume(start) // the contexts' end is seen once the process runs
				innerDone := make(chan struct{})
				var innerEnd time.Time
				go func() {
					time.Sleep(lag)
					ss.resume(start)
					_, innerEnd = waitOut(pair[0], ss, start, nil)
					returnResult(ss, start)
					close(innerDone)
				}()
				got, outerEnd := waitOut(pair[1], ss, start, innerDone)
				<-innerDone
				require.True(t, got, "slacks %v inside %v, stops %v: the outer wait gave up at +%v before the inner one's result (+%v)",
					pair[0], pair[1], ss, outerEnd.Sub(start), innerEnd.Sub(start))
			})
		})
	}
}

// Fault: after a freeze that outlasted both wall bounds, both waits saw
// the stretch the freeze held at one wake and started their last stretch,
// 5 ms each, there: they ended together, and the outer one gave up
// before the inner one's result reached it (12 of the property's 400
// patterns). The last stretch is the rest of each slack: the inner one's
// 20 ms ends first.
//
//	+0          the contexts end; both slacks start (the inner 1 ms later)
//	+4 ms       the process is frozen
//	+1.6 s      it runs: both waits past their bounds (1.08 s, 1.4 s)
//	+1.62 s     the inner wait gives up: its last stretch, all 20 ms of it
//	+1.6201 s   its result reaches the outer wait, which has it
//	+1.7 s      where the outer one would have given up
func TestAWaitInsideAnotherAfterAFreezeOutlastingBothBoundsGivesUpFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ss := stops{{4 * time.Millisecond, 1600 * time.Millisecond}}
		start := time.Now()
		innerDone := make(chan struct{})
		go func() {
			time.Sleep(time.Millisecond)
			waitOut(20*time.Millisecond, ss, start, nil)
			returnResult(ss, start)
			close(innerDone)
		}()
		got, end := waitOut(100*time.Millisecond, ss, start, innerDone)
		<-innerDone
		require.True(t, got, "the outer wait gave up at +%v before the inner one's result", end.Sub(start))
		assert.Equal(t, 1600*time.Millisecond+20*time.Millisecond+resultReturn, end.Sub(start),
			"the inner wait's last stretch, its whole 20 ms, and its result's way")
	})
}
