package deadline

import (
	"context"
	"fmt"
	"math"
	"time"
)

// A Reserve is the time a phase needs. It is evaluated live, every time a
// deadline is computed, so it can follow the work that is left (see Work).
// It must be safe for concurrent use and return quickly; a negative result
// counts as zero.
type Reserve func() time.Duration

// Fixed returns a Reserve of constant length d.
func Fixed(d time.Duration) Reserve { return func() time.Duration { return d } }

// Work returns a Reserve for items units of work done parallel at a time,
// each taking about each.Estimate(): ceil(items/parallel) x estimate. This is
// "running sandboxes x estimated pause / concurrency". items and parallel are
// called every time the reserve is evaluated, so the reserve follows the live
// count. A nil items, or a count <= 0, reserves nothing; a nil parallel, or a
// parallel below 1, counts as 1; a nil each estimates zero. The product
// saturates instead of overflowing.
func Work(items func() int, each *Estimator, parallel func() int) Reserve {
	return func() time.Duration {
		if items == nil {
			return 0
		}
		n := items()
		if n <= 0 {
			return 0
		}
		k := 1
		if parallel != nil {
			k = max(parallel(), 1)
		}
		rounds := int64(n/k) + int64(min(n%k, 1))
		est := each.Estimate()
		if est > 0 && rounds > math.MaxInt64/int64(est) {
			return math.MaxInt64
		}
		return time.Duration(rounds) * est
	}
}

// A Phase is one named stage of a shutdown and the Reserve it needs.
// A nil Reserve means the phase reserves nothing.
type Phase struct {
	// Name identifies the phase in Deadline, Context and Windows; it must
	// be unique within the plan and not empty.
	Name string
	// Reserve is the time this phase needs before the budget's deadline;
	// it pushes the deadlines of all earlier phases back by that much.
	Reserve Reserve
}

// A Plan splits a Budget into ordered phases. A phase's deadline is the
// budget's deadline minus the reserves of all later phases, so time a phase
// leaves unused flows to the next, and a phase whose successors need less
// (fewer sandboxes left) may run longer. When the budget is too small, later
// reserves win: earlier phases shrink, down to zero length at T0, and
// Shortfall says by how much the budget is short.
//
// Deadlines are absolute times computed at the moment they are asked for.
// A Plan is safe for concurrent use.
type Plan struct {
	budget *Budget
	phases []Phase
	index  map[string]int
}

// NewPlan returns a Plan over b with phases in the order they run.
// It fails, naming the field, if b is nil, there are no phases, a name is
// empty or repeated, or a reserve is negative when NewPlan evaluates it once
// (so a negative Fixed reserve is caught here; a live reserve that turns
// negative later counts as zero).
func NewPlan(b *Budget, phases ...Phase) (*Plan, error) {
	if b == nil {
		return nil, fmt.Errorf("deadline: NewPlan: budget must not be nil")
	}
	if len(phases) == 0 {
		return nil, fmt.Errorf("deadline: NewPlan: phases: need at least one phase")
	}
	p := &Plan{budget: b, phases: make([]Phase, len(phases)), index: make(map[string]int, len(phases))}
	for i, ph := range phases {
		if ph.Name == "" {
			return nil, fmt.Errorf("deadline: NewPlan: phases[%d].Name must not be empty", i)
		}
		if j, dup := p.index[ph.Name]; dup {
			return nil, fmt.Errorf("deadline: NewPlan: phases[%d].Name %q duplicates phases[%d].Name", i, ph.Name, j)
		}
		if ph.Reserve == nil {
			ph.Reserve = Fixed(0)
		} else if r := ph.Reserve(); r < 0 {
			return nil, fmt.Errorf("deadline: NewPlan: phases[%d].Reserve (phase %q) must not be negative, got %v", i, ph.Name, r)
		}
		p.index[ph.Name] = i
		p.phases[i] = ph
	}
	return p, nil
}

// Budget returns the budget the plan divides.
func (p *Plan) Budget() *Budget { return p.budget }

// Phases returns the phase names in the order they run.
func (p *Plan) Phases() []string {
	names := make([]string, len(p.phases))
	for i, ph := range p.phases {
		names[i] = ph.Name
	}
	return names
}

// Deadline returns the absolute deadline of the named phase, as of now:
// the budget's Deadline minus the reserves of all later phases, but never
// before T0. It panics if the plan has no phase of that name: names are
// fixed at construction, so an unknown one is a programming error.
func (p *Plan) Deadline(name string) time.Time {
	i := p.mustIndex(name)
	return p.Windows()[i].Deadline
}

// Context returns a context derived from parent whose deadline is the named
// phase's deadline at the time of the call. The context does not follow
// later changes of the reserves or the budget; a phase that should run
// longer when later work shrinks (a preStop wait) re-reads Deadline instead.
// It panics on an unknown name, like Deadline.
func (p *Plan) Context(parent context.Context, name string) (context.Context, context.CancelFunc) {
	return context.WithDeadline(parent, p.Deadline(name))
}

// Shortfall returns by how much the budget is too small for all reserves
// together, as of now: sum of reserves - (Deadline - T0), or zero if they
// fit. It is positive exactly when Windows squeezes some phase. It saturates
// at the largest Duration.
func (p *Plan) Shortfall() time.Duration {
	st := p.budget.State()
	return p.overrun(0, st.Start, st.Deadline)
}

// ShortfallFrom returns by how much the reserves of the named phase and all
// later phases exceed the time left now until the budget's Deadline, or
// zero if they fit. Where Shortfall measures the whole plan from T0,
// ShortfallFrom measures what is left when the named phase starts: at
// SIGTERM, ShortfallFrom("preserve") says whether the preStop wait left
// enough. It saturates at the largest Duration and panics on an unknown
// name, like Deadline.
func (p *Plan) ShortfallFrom(name string) time.Duration {
	i := p.mustIndex(name)
	st := p.budget.State()
	return p.overrun(i, time.Now(), st.Deadline)
}

// overrun returns by how much the reserves of phases[from:], laid end to
// end from start, run past deadline, or zero. The sum is kept as a
// time.Time, exact even for absurd reserves, and the result saturates at
// the largest Duration.
func (p *Plan) overrun(from int, start, deadline time.Time) time.Duration {
	end := start
	for _, ph := range p.phases[from:] {
		end = end.Add(max(ph.Reserve(), 0))
	}
	return max(end.Sub(deadline), 0)
}

// A Window is one phase's place in the plan at a moment.
type Window struct {
	Name     string        `json:"name"`
	Reserve  time.Duration `json:"reserve_ns"` // the phase's own reserve, as evaluated
	Deadline time.Time     `json:"deadline"`   // absolute; T0 <= Deadline <= budget Deadline
	// Squeezed is how much later the deadline would be if the budget were
	// large enough for all reserves after this phase.
	Squeezed time.Duration `json:"squeezed_ns,omitempty"`
}

// Windows returns every phase's reserve and deadline, in plan order, with
// each reserve evaluated once, now. Deadlines never decrease along the plan;
// the last phase's deadline is the budget's Deadline.
func (p *Plan) Windows() []Window {
	st := p.budget.State()
	out := make([]Window, len(p.phases))
	// want walks back from the budget's deadline by each reserve. It is a
	// time.Time, not a Duration sum, so even absurd reserves cannot overflow.
	// Each deadline is want raised to T0 (later reserves win, and squeeze
	// this phase down to T0). It is never after the budget's deadline:
	// reserves are not negative, and T0 <= Deadline is a Budget invariant.
	want := st.Deadline
	for i := len(p.phases) - 1; i >= 0; i-- {
		r := max(p.phases[i].Reserve(), 0)
		d := laterOf(want, st.Start)
		out[i] = Window{Name: p.phases[i].Name, Reserve: r, Deadline: d, Squeezed: d.Sub(want)}
		want = want.Add(-r)
	}
	return out
}

func (p *Plan) mustIndex(name string) int {
	i, ok := p.index[name]
	if !ok {
		panic(fmt.Sprintf("deadline: plan has no phase %q", name))
	}
	return i
}
