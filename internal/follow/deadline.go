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
// Deadline) either reads the move or is told it.
type Deadline struct{ at atomic.Pointer[time.Time] }

// Move moves d to dl if d has none or dl is earlier, and reports whether
// it moved. A dl at or after d's deadline leaves d as it is: d never moves
// later. Safe for concurrent use: of moves racing, the earliest stands.
func (d *Deadline) Move(dl time.Time) bool {
	for {
		was := d.at.Load()
		if was != nil && !dl.Before(*was) {
			return false
		}
		if d.at.CompareAndSwap(was, &dl) {
			return true
		}
	}
}

// Get returns d's deadline, and false if it has none (no Move yet).
func (d *Deadline) Get() (time.Time, bool) {
	if t := d.at.Load(); t != nil {
		return *t, true
	}
	return time.Time{}, false
}

// Cap returns the earlier of dl (when ok) and d's deadline (when it has
// one), and whether there is either: ctx.Deadline's result bounded by d,
// as Context's Deadline reports it.
func (d *Deadline) Cap(dl time.Time, ok bool) (time.Time, bool) {
	if t := d.at.Load(); t != nil && (!ok || t.Before(dl)) {
		return *t, true
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
