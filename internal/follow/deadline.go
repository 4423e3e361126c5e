package follow

import (
	"context"
	"sync/atomic"
	"time"
)

// A Deadline is a deadline that only moves earlier: a step's, a Run's, a
// teardown's, as a budget that moves SIGKILL earlier or a Force moves it,
// from other goroutines than the one that reads it. The zero Deadline has
// none; Move sets it. It must not be copied after first use.
//
// It says where work must end; it ends nothing. Whoever moves it cancels
// the work's context there (Earlier, a timer) and tells the work first,
// after the move: work that reads the Deadline after it made itself
// reachable to be told (a Run that registers, then reads its context's
// Deadline) either reads the move or is told it. Work that waits for it
// selects on Changed (through its context: see Changed).
//
// One pointer, as before it said when it moved: pause's run, which holds
// one, stays in its size class.
type Deadline struct{ s atomic.Pointer[deadlineState] }

// deadlineState is a Deadline's deadline, if set, and the channel its
// next move closes, if Changed made one. A move replaces it, so that a
// channel is closed once, by the move that replaced its state.
type deadlineState struct {
	at    time.Time
	set   bool          // at is the deadline: a Move set it
	moved chan struct{} // closed by the next Move; nil until Changed asked for it
}

// Move moves d to dl if d has none or dl is earlier, and reports whether
// it moved. A dl at or after d's deadline leaves d as it is: d never moves
// later. A move closes the channel Changed returned. Safe for concurrent
// use: of moves racing, the earliest stands.
func (d *Deadline) Move(dl time.Time) bool {
	for {
		was := d.s.Load()
		if was != nil && was.set && !dl.Before(was.at) {
			return false
		}
		if d.s.CompareAndSwap(was, &deadlineState{at: dl, set: true}) {
			if was != nil && was.moved != nil {
				close(was.moved)
			}
			return true
		}
	}
}

// Changed returns a channel that is closed the next time d moves. Ask
// for it before reading d (Get, a Context's Deadline), as
// deadline.Budget.Changed is asked for, so that a move between the two is
// not missed, and again once it is closed.
func (d *Deadline) Changed() <-chan struct{} {
	for {
		was := d.s.Load()
		if was != nil && was.moved != nil {
			return was.moved
		}
		now := &deadlineState{moved: make(chan struct{})}
		if was != nil {
			now.at, now.set = was.at, was.set
		}
		if d.s.CompareAndSwap(was, now) {
			return now.moved
		}
	}
}

// Get returns d's deadline, and false if it has none (no Move yet).
func (d *Deadline) Get() (time.Time, bool) {
	if t := d.s.Load(); t != nil && t.set {
		return t.at, true
	}
	return time.Time{}, false
}

// Cap returns the earlier of dl (when ok) and d's deadline (when it has
// one), and whether there is either: ctx.Deadline's result bounded by d,
// as Context's Deadline reports it.
func (d *Deadline) Cap(dl time.Time, ok bool) (time.Time, bool) {
	if t := d.s.Load(); t != nil && t.set && (!ok || t.at.Before(dl)) {
		return t.at, true
	}
	return dl, ok
}

// Context returns ctx whose Deadline follows d: see Context.
func (d *Deadline) Context(ctx context.Context) Context {
	return Context{ctx, d}
}

// A Context is a context whose Deadline is the earlier of its parent's
// and the Deadline it follows, read at each call. Work that sizes itself
// by ctx.Deadline() (a request's timeout, a teardown's stages, a cheaper
// checkpoint when time is short) then plans for the time it has: a
// context's own deadline is fixed when it is made, and a deadline moved
// since ends it earlier by a cancel, which no deadline says.
//
// Its Done, Err and Value are its parent's, unchanged: it is cancelled as
// its parent is, not at the Deadline it reports, which whoever moves that
// deadline arranges. A child made from it finds the parent's cancelCtx
// through Value and registers with it, as with the parent itself, where a
// context of another kind has each child watched by a goroutine. Made by
// Deadline.Context; held in a struct, as a field, and passed as a
// pointer to it, it costs no allocation of its own.
type Context struct {
	context.Context
	d *Deadline
}

// Deadline returns the earlier of the parent's deadline and the one the
// followed Deadline has now.
func (c Context) Deadline() (time.Time, bool) {
	return c.d.Cap(c.Context.Deadline())
}

// Value is the parent's, but for the key by which Changed finds the
// Deadline c follows.
func (c Context) Value(key any) any {
	if key == (followedKey{}) {
		return followed{c.d, c.Context}
	}
	return c.Context.Value(key)
}

// followedKey is the key of a Context's Value that is the Deadline it
// follows, with its parent (followed).
type followedKey struct{}

// followed is the Deadline a Context follows, and the Context's parent,
// which may follow others.
type followed struct {
	d      *Deadline
	parent context.Context
}

// Changed returns a channel that is closed the next time the Deadline
// ctx's Deadline follows moves, where ctx is a Context or a context made
// from one (through context.WithCancel, WithValue, ...): a wait that ends
// at ctx.Deadline() reads it again then, at the move, where no context
// says when its Deadline moved. ok is false, and the channel nil, when
// ctx follows no Deadline (a context's own deadline does not move) or
// more than one (Contexts over different Deadlines in its chain: no one
// channel says when either moved). Contexts over the same Deadline (a
// pause Run's phase and work contexts) are one. Ask for it before reading
// ctx.Deadline(), as for Deadline.Changed.
func Changed(ctx context.Context) (_ <-chan struct{}, ok bool) {
	var d *Deadline
	for f, more := ctx.Value(followedKey{}).(followed); more; f, more = f.parent.Value(followedKey{}).(followed) {
		if d != nil && f.d != d {
			return nil, false
		}
		d = f.d
	}
	if d == nil {
		return nil, false
	}
	return d.Changed(), true
}
