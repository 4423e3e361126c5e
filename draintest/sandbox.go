package draintest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/drainkit/drainkit/pause"
)

// A Fault is what one Preserve attempt does instead of succeeding.
type Fault int

// The faults an attempt can be scripted with.
const (
	// OK: the attempt takes Latency (or returns ctx's error if it ends
	// first) and succeeds.
	OK Fault = iota
	// Transient: the attempt takes Latency and returns ErrTransient.
	Transient
	// Permanent: the attempt takes Latency and returns
	// backoff.Permanent(ErrPermanent).
	Permanent
	// Plain: the attempt takes Latency and returns ErrPermanent unwrapped,
	// for classifier tests.
	Plain
	// Hang: the attempt ignores its context and returns ErrHung only after
	// HangFor (default DefaultHang). Its goroutine outlives a Run that
	// abandons it: in a synctest bubble, sleep HangFor before the bubble's
	// function returns, or synctest reports a deadlock.
	Hang
	// Panic: the attempt panics with "draintest: injected panic".
	Panic
	// Vanish: the sandbox disappears: the attempt returns pause.ErrGone,
	// the Node no longer lists it, and every later attempt returns
	// pause.ErrGone too (until Node.Add puts it back).
	Vanish
)

// DefaultHang is how long a Hang attempt blocks when HangFor is zero: far
// beyond any grace period, yet finite so that synctest bubbles end.
const DefaultHang = 24 * time.Hour

// The errors fake attempts return.
var (
	ErrTransient = errors.New("draintest: transient failure")
	ErrPermanent = errors.New("draintest: permanent failure")
	ErrHung      = errors.New("draintest: returned after hanging")
)

// A Sandbox is a fake pause.Sandbox. Set its fields before the Run; read
// its results through its methods, which are safe for concurrent use.
// It implements pause.Estimated, pause.Prioritized and pause.Sized; an
// Estimate or Bytes of zero means unknown.
//
// A preserve of a sandbox already preserved (a listing that lags, a
// Lister that lists it again) is answered at once with pause.ErrGone
// ("already preserved"), as pause.Sandbox asks and a real server does: no
// Latency, no step of Faults, no Disk write. Its resume is Node.Add of it
// again on its Node (or a new Sandbox of its ID added there): the Node
// lists it, and its next preserve runs the next attempt in full.
type Sandbox struct {
	Name     string        // its ID
	Latency  time.Duration // how long an attempt takes
	Estimate time.Duration // what EstimatedPreserve reports; zero: unknown
	Prio     int           // what Priority reports
	Bytes    int64         // what Size reports
	// Faults scripts the attempts in order: attempt i does Faults[i]; the
	// attempts after the script succeed. A preserve of the sandbox already
	// preserved is no attempt of the script. A sandbox removed from its
	// Node is gone, whatever the script says.
	Faults  []Fault
	HangFor time.Duration // how long a Hang lasts; zero: DefaultHang
	// Disk, if set, is where a successful attempt writes Bytes (> 0) after its
	// Latency: the attempt then takes as long as the shared Disk makes it.
	Disk *Disk

	node    *Node
	removed bool // taken off node (Node.Remove, a Vanish); guarded by node's mutex

	mu        sync.Mutex
	attempts  int
	step      int // the next attempt's index in Faults: a preserve again, answered at once, runs none
	preserved bool
	vanished  bool // a Vanish attempt ran while on no Node
	started   []time.Time
}

// ID returns the sandbox's Name.
func (s *Sandbox) ID() string { return s.Name }

// EstimatedPreserve returns Estimate.
func (s *Sandbox) EstimatedPreserve() time.Duration { return s.Estimate }

// Size returns Bytes.
func (s *Sandbox) Size() int64 { return s.Bytes }

// Priority returns Prio.
func (s *Sandbox) Priority() int { return s.Prio }

// Preserve runs the next scripted attempt; once it was preserved, and
// until a resume (Node.Add), it returns pause.ErrGone at once instead
// ("already preserved"); once the sandbox was removed
// from its Node (Node.Remove, a Vanish) and not added again, or, on no
// Node, once an attempt vanished (a Lister of the test's own listing it
// again), it returns pause.ErrGone instead. A Sandbox with a field no sandbox can have (a
// negative Latency or HangFor, a Fault outside the constants, a Disk with
// Bytes <= 0) fails every attempt at once with a permanent error
// (backoff.Permanent) naming the field.
func (s *Sandbox) Preserve(ctx context.Context) error {
	s.mu.Lock()
	fault, again := OK, s.preserved
	if !again {
		if s.step < len(s.Faults) {
			fault = s.Faults[s.step]
		}
		s.step++
	}
	s.attempts++
	s.started = append(s.started, time.Now())
	vanished := s.vanished && s.node == nil
	s.mu.Unlock()

	if err := s.check(); err != nil {
		return backoff.Permanent(err) // no retry mends a test's configuration
	}
	if s.node != nil && s.node.isRemoved(s) {
		// Deleted after a listing took it: the runtime has nothing to
		// preserve, whatever the script says.
		return fmt.Errorf("draintest: %s: removed from the node: %w", s.Name, pause.ErrGone)
	}
	if vanished {
		// Listed again by a Lister of the test's own: what vanished stays
		// gone, as it does on a Node.
		return fmt.Errorf("draintest: %s: vanished by an earlier attempt: %w", s.Name, pause.ErrGone)
	}
	if again {
		// Not resumed since (Node.Add): a server has it preserved, and
		// says so at once.
		return fmt.Errorf("draintest: %s: already preserved, not resumed since: %w", s.Name, pause.ErrGone)
	}
	if s.node != nil {
		s.node.enter()
		defer s.node.leave()
	}
	switch fault {
	case Panic:
		panic("draintest: injected panic")
	case Hang:
		time.Sleep(cmp.Or(s.HangFor, DefaultHang))
		return ErrHung
	case Vanish:
		if s.node != nil {
			s.node.removeSandbox(s)
		} else {
			s.mu.Lock()
			s.vanished = true
			s.mu.Unlock()
		}
		return fmt.Errorf("draintest: %s: %w", s.Name, pause.ErrGone)
	}
	if err := sleep(ctx, s.Latency); err != nil {
		return err
	}
	if s.Disk != nil && fault == OK {
		if err := s.Disk.Write(ctx, s.Bytes); err != nil {
			return err
		}
	}
	switch fault {
	case Transient:
		return ErrTransient
	case Permanent:
		return backoff.Permanent(ErrPermanent)
	case Plain:
		return ErrPermanent
	}
	s.mu.Lock()
	s.preserved = true
	s.mu.Unlock()
	return nil
}

// check returns an error naming the first field of s that no sandbox can have. Each
// was taken for something that passes: a negative Latency or HangFor for none (an
// instant preserve, a Hang that does not hang), a Fault outside the constants for OK,
// and a Disk with no Bytes to write for a device that never slows the preserve, so a
// test over them passed measuring nothing.
func (s *Sandbox) check() error {
	switch {
	case s.Latency < 0:
		return fmt.Errorf("draintest: sandbox %q: Sandbox.Latency must not be negative, got %v", s.Name, s.Latency)
	case s.HangFor < 0:
		return fmt.Errorf("draintest: sandbox %q: Sandbox.HangFor must not be negative (0: DefaultHang), got %v", s.Name, s.HangFor)
	case s.Disk != nil && s.Bytes <= 0:
		return fmt.Errorf("draintest: sandbox %q: Sandbox.Bytes must be > 0 with a Disk: it is what the preserve writes there, and with none the Disk never slows it; got %d", s.Name, s.Bytes)
	}
	for i, f := range s.Faults {
		if f < OK || f > Vanish {
			return fmt.Errorf("draintest: sandbox %q: Sandbox.Faults[%d] is %d, not a Fault (OK to Vanish)", s.Name, i, f)
		}
	}
	return nil
}

// Attempts returns how many times Preserve was called.
func (s *Sandbox) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// Preserved reports whether an attempt succeeded, since the last resume
// (Node.Add) if any.
func (s *Sandbox) Preserved() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.preserved
}

// Starts returns when each attempt started.
func (s *Sandbox) Starts() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.started...)
}

// sleep does work that takes d: it returns nil once d has passed, or ctx's error when
// ctx ends first. Work of no length still needs ctx alive.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	return until(ctx, time.Now().Add(d))
}

// until waits for work begun earlier that ends at end: it returns nil at end, or ctx's
// error when ctx ended first. Under synctest the work's timer and ctx's deadline can
// fire at the same instant, and select picks either: work that ended at that very
// moment is done, whichever was picked. In real time both are noticed late on a busy
// machine (the goroutine waits for a CPU; ctx's own timer runs in a goroutine of its
// own, so ctx.Done() may not even be closed yet), and select picks either: so a ctx
// whose deadline came before end cut the work, whichever was picked, as it cuts a real
// runtime's.
func until(ctx context.Context, end time.Time) error {
	t := time.NewTimer(time.Until(end))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		if time.Now().Before(end) {
			return ctx.Err()
		}
	}
	if dl, ok := ctx.Deadline(); ok && dl.Before(end) {
		return cmp.Or(ctx.Err(), context.DeadlineExceeded)
	}
	return nil
}

// A Disk is a fake device that preserves share: each writer gets
// min(PerWriter, Bandwidth/writers) bytes per second, so the throughput of
// the whole node grows with the writers up to Bandwidth/PerWriter of them
// (the knee, one writer at least: a lone writer has the whole device) and
// is flat beyond it, or falls when Thrash is set: with w
// writers past the knee the bandwidth is Bandwidth / (1 + Thrash x (w -
// knee)). A Sandbox with a Disk writes its Bytes to it in 32 chunks, the
// rate of each chunk set by the writers at its start. Set the fields before
// the Run; a Disk is safe for concurrent use.
//
// Jitter makes the device noisy, as a virtual disk shared with busy
// neighbours is: each write takes exp(Jitter x N(0,1)) times as long as the
// device would make it, drawn from a generator seeded with Seed.
//
// Bandwidth is required; a write to a Disk whose fields no device has (a
// Bandwidth that is not a finite number > 0, a negative or non-finite
// PerWriter, Thrash or Jitter) fails the attempt with an error naming the
// field. A write longer than the largest Duration takes that long.
type Disk struct {
	Bandwidth float64 // bytes per second of the device
	PerWriter float64 // bytes per second one writer can reach; 0: Bandwidth
	Thrash    float64 // how fast the bandwidth falls past the knee; 0: flat
	Jitter    float64 // sigma of the lognormal factor on each write's time
	Seed      uint64  // seeds the noise generator

	mu      sync.Mutex
	writers int
	rng     *rand.Rand
}

// factor returns the noise factor of one write.
func (d *Disk) factor() float64 {
	if d.Jitter == 0 {
		return 1
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.rng == nil {
		d.rng = rand.New(rand.NewPCG(d.Seed, d.Seed^0x9e3779b97f4a7c15))
	}
	return math.Exp(d.Jitter * d.rng.NormFloat64())
}

// chunks is how many pieces a write is split into.
const chunks = 32

// check returns an error naming the first field no device can have, and a write of n
// bytes that no Sandbox can make.
func (d *Disk) check(n int64) error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !(d.Bandwidth > 0) || !finite(d.Bandwidth):
		return fmt.Errorf("draintest: Disk.Bandwidth must be a finite number of bytes per second > 0, got %v", d.Bandwidth)
	case !(d.PerWriter >= 0) || !finite(d.PerWriter):
		return fmt.Errorf("draintest: Disk.PerWriter must be finite and >= 0 (0: Bandwidth), got %v", d.PerWriter)
	case !(d.Thrash >= 0) || !finite(d.Thrash):
		return fmt.Errorf("draintest: Disk.Thrash must be finite and >= 0, got %v", d.Thrash)
	case !(d.Jitter >= 0) || !finite(d.Jitter):
		return fmt.Errorf("draintest: Disk.Jitter must be finite and >= 0, got %v", d.Jitter)
	case n < 0:
		return fmt.Errorf("draintest: Sandbox.Bytes written to a Disk must not be negative, got %d", n)
	}
	return nil
}

// seconds is a duration of s seconds, saturated at the largest Duration: past it the
// conversion is undefined (it gave a negative one, which sleep took for none).
func seconds(s float64) time.Duration {
	ns := s * float64(time.Second)
	if !(ns < math.MaxInt64) {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// Write writes n bytes to the Disk, sharing it with the writes in flight: it returns
// once they are written, or ctx's error when ctx ends first. A Sandbox with a Disk calls
// it; a fake runtime of its own calls it to make its pauses share a device (the examples'
// sandbox.Fake does). In real time too a write ends when the device's rates say, however
// late a busy machine wakes it between chunks (as late as its last wake at most). A Disk whose fields no device has, or a negative n, fails at once
// with a permanent error (backoff.Permanent) naming the field.
func (d *Disk) Write(ctx context.Context, n int64) error {
	if err := d.check(n); err != nil {
		return backoff.Permanent(err) // no retry mends a test's configuration
	}
	d.mu.Lock()
	d.writers++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.writers--
		d.mu.Unlock()
	}()
	if err := ctx.Err(); err != nil {
		return err
	}
	f := d.factor()
	end := time.Now()
	for range chunks {
		// A chunk ends its time after the one before ended, not after this
		// goroutine woke: in real time a busy machine wakes it late at every
		// chunk, and 32 late wakes made a write of 0.1 s take 0.7-0.95 s.
		// The next chunk makes up for a late one.
		end = end.Add(seconds(f * float64(n) / chunks / d.rate()))
		if err := until(ctx, end); err != nil {
			return err
		}
	}
	return nil
}

// rate is the bytes per second one writer gets now.
func (d *Disk) rate() float64 {
	d.mu.Lock()
	w := float64(d.writers)
	d.mu.Unlock()
	per := d.PerWriter
	if per == 0 {
		per = d.Bandwidth
	}
	bw := d.Bandwidth
	if knee := max(d.Bandwidth/per, 1); w > knee { // a lone writer has the whole device
		bw /= 1 + d.Thrash*(w-knee)
	}
	return min(per, bw/w)
}

// resume makes a preserved sandbox run again (Node.Add): it is listed, and
// its next preserve runs the next attempt in full.
func (s *Sandbox) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.preserved = false
}
