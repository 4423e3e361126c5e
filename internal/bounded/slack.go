package bounded

import "time"

// stretch is the longest stretch of a Slack counted at once, and jitter
// how late a running process sees its timers: a few hundred µs (at load
// 10 on a 2-core machine shared with 6 test runs, 190 µs at the median,
// 2.5 ms at the 99th percentile of 400). A stretch seen later counts its
// length less its lateness past jitter (nothing when that is longer): a
// process stopped by CFS bandwidth control until its next period, or by
// SIGSTOP, sees it tens or hundreds of ms late, and the goroutines it
// waits for, stopped with it, ran that much less; a loaded node's
// scheduler holds them all a few ms at each wake. Short stretches fit
// between the stops of a container at its quota (at 50 ms of every 100
// ms, most of them), so a slack runs out there in time the process ran,
// where longer ones would end in a stop every time and never count.
const (
	stretch = 5 * time.Millisecond
	jitter  = time.Millisecond
)

// stopsAllowed is the wall time a slack allows for its process's stops
// beyond five times itself (see WallBound): ten of CFS bandwidth
// control's periods (100 ms unless set), in each of which a process at
// its CPU quota runs.
const stopsAllowed = time.Second

// WallBound is how long a slack of d lasts at most in wall time before
// its last stretch, the rest of d, which begins at its waiter's first
// wake past it: stopsAllowed and four times d, so that the whole wait is
// at most a second and five times d. A process held so much that its
// waiter did not see d of stretches end on time within it (a container
// at a CPU quota its other threads use up, every stretch seen a period
// late; a node loaded enough that every wake is 6 ms late) never gave up
// on a call that hangs, and the drain's later steps (the ublk teardown,
// which must run before SIGKILL) never began (row 3240). The second lets
// a process be stopped three times for 100 to 150 ms, and a loaded
// machine delay its thaws, inside a slack (rows 2940, 3020, 3021); not
// without limit: beside 24 busy loops (load 25 to 40) a stop held for
// 100 ms lasted up to 850 ms, the process seen stopped 720 ms after its
// SIGSTOP, running 410 ms after its SIGCONT, and a stop that begins once
// the last stretch has begun ends the slack as the process runs again
// (row 3641). The bound and the last stretch grow with d, so that a wait
// inside another with a longer slack gives up first and the outer one
// gets its result (row 3320): pause's 20 ms (1.08 s and at most 20 ms)
// inside drain's 100 ms (1.4 s and at most 100 ms); draingrpc's 50 ms
// (1.2 s and 50 ms) and ublk's reads, 20 ms, inside a step's 100 ms.
// Drain's ends within the budget's smallest margin before SIGKILL (1.5 s)
// of the deadline it follows, each wake seen as late as the process runs.
func WallBound(d time.Duration) time.Duration { return stopsAllowed + 4*d }

// A Slack is a wait of a given length counted in the time its waiter saw
// pass on time, not in wall time: a process frozen inside it does not
// spend it (see the package's doc). It is one goroutine's: the one that
// waits on C and calls Spent.
type Slack struct {
	left  time.Duration // not yet seen pass on time
	cur   time.Duration // the stretch the timer runs
	timer *time.Timer
	due   time.Time // the stretch's end
	bound time.Time // past it, the next stretch is the last (WallBound)
	last  bool      // the stretch the timer runs ends the slack, however late seen
}

// NewSlack starts a slack of d from now: its first stretch, at most stretch
// long. Stop it when done with it.
func NewSlack(d time.Duration) *Slack {
	now := time.Now()
	s := &Slack{left: max(d, 0), bound: now.Add(WallBound(d))}
	s.cur = min(s.left, stretch)
	s.due = now.Add(s.cur)
	s.timer = time.NewTimer(s.cur)
	return s
}

// C is the channel on which the current stretch ends: once it fired and
// was read, call Spent.
func (s *Slack) C() <-chan time.Time { return s.timer.C }

// Spent, called once C fired and was read, counts the stretch that ended
// (its length, less how late past jitter this goroutine saw it end) and
// reports whether the whole slack has been counted, or the last stretch
// ended; if not, it starts the next stretch, from now: the last one, the
// rest of the slack in one, if the slack has lasted its wall bound. A stretch seen late counts less,
// or nothing: its process, or this goroutine, did not run for part of it
// (how much is unknown), and what the slack waits for may have been
// stopped with it.
func (s *Slack) Spent() bool {
	now := time.Now()
	lateness := max(now.Sub(s.due)-jitter, 0)
	s.left -= max(s.cur-lateness, 0)
	if s.left <= 0 || s.last {
		return true
	}
	// Not given up at once: this wake may be the first after a stop that
	// outlasted the bound, and the call, stopped with it, gets the rest
	// of its slack, counted or not. The rest, not a stretch: a wait
	// inside this one, with a shorter slack, woken by the same stop,
	// has less of its own left and gives up first, where a stretch each
	// ended both at once and this one could abandon the result the
	// inner one had just settled (row 3320).
	s.last = !now.Before(s.bound)
	s.cur = min(s.left, stretch)
	if s.last {
		s.cur = s.left
	}
	s.due = now.Add(s.cur)
	s.timer.Reset(s.cur) // fired, and read: no stale tick
	return false
}

// Stop stops the slack's timer.
func (s *Slack) Stop() { s.timer.Stop() }
