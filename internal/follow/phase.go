package follow

import (
	"context"
	"time"
)

// A Phase is a Context whose Deadline is also the time past which the work
// under it starts nothing new: a pause Run's phase deadline, as Tighten
// moves it. Work may run on past it, to a later deadline its own context
// has (a Preserve's runs to the hard deadline), but a new start (a request
// sent again after a server's Retry-After, a retry) past it takes the time
// of the phases after. StartBy finds it from any context made from it, so
// that such work keeps to the rule its caller keeps. Made by
// Deadline.Phase; as a Context, held in a struct and passed as a pointer
// to it, it costs no allocation of its own.
type Phase struct{ Context }

// Phase returns ctx whose Deadline follows d and which is a phase's: see
// Phase.
func (d *Deadline) Phase(ctx context.Context) Phase {
	return Phase{d.Context(ctx)}
}

// phaseKey is the key of a Phase's Value that is the Phase itself.
type phaseKey struct{}

// Value is the Context's, but for the key by which StartBy finds the
// Phase. Its receiver is a pointer, so that the Phase is found as itself:
// a Phase returned by value is boxed, an allocation at every StartBy, and
// a Phase used as a Context by value (which would copy it) does not
// compile.
func (p *Phase) Value(key any) any {
	if key == (phaseKey{}) {
		return p
	}
	return p.Context.Value(key)
}

// StartBy returns the time past which the work under ctx starts nothing
// new: the Deadline, read now, of the Phase ctx was made from (through
// context.WithDeadline, WithoutCancel, ..., which pass values on). ok is
// false when ctx was made from no Phase, or its Phase has no deadline:
// then only ctx's own deadline bounds a start.
func StartBy(ctx context.Context) (_ time.Time, ok bool) {
	p, ok := ctx.Value(phaseKey{}).(*Phase)
	if !ok {
		return time.Time{}, false
	}
	return p.Deadline()
}
