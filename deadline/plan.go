package deadline

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/drainkit/drainkit/internal/planat"
	"github.com/drainkit/drainkit/internal/satdur"
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

// A Phase is one named stage of a shutdown and the time it needs.
type Phase struct {
	// Name identifies the phase in Window, Deadline and Context; it must
	// be unique within the plan and not empty.
	Name string
	// Reserve is the time this phase needs before the budget's deadline;
	// it pushes the deadlines of all earlier phases back by that much. A
	// nil Reserve reserves nothing.
	Reserve Reserve
	// Critical marks a phase whose reserve comes first when the time left
	// is too short for every reserve, and that nothing started before it
	// may spend: the Hard deadline of every earlier phase is where this
	// phase's window begins. Mark a block-device teardown critical: a
	// daemon killed with live devices can crash the host, which costs more
	// than one unfinished pause.
	Critical bool
	// Max bounds how long the phase may run once it has started (zero: no
	// bound but its deadline), for example how long to wait for admitted
	// requests. It never moves a deadline later.
	Max time.Duration
}

// A Plan splits a Budget into ordered phases. It is the one place where the
// budget becomes deadlines: every phase of a shutdown asks the Plan for its
// Window by name when it starts, and runs under it.
//
// While the time left covers the reserves of the phase starting now and of
// every later one, the phase's deadline is the budget's deadline minus the
// reserves of the later phases: time a phase leaves unused flows to the
// next, and a phase whose successors need less (fewer sandboxes left) may
// run longer.
//
// When the time left is too short for those reserves (the kubelet's 2 s
// after an overrunning preStop hook, or a grace period cut by
// `kubectl delete --grace-period`), one rule shares it: critical phases get
// their reserves first, and the other phases share what remains in
// proportion to their reserves. A phase with no reserve then gets no time;
// if even the critical reserves do not fit, the critical phases share the
// time left in proportion to theirs. Every phase still runs, in order, and
// the last one ends at the budget's deadline.
//
// Before SIGTERM, the first phase of a plan of more than one is the preStop
// wait, and the later ones start at SIGTERM, which the kubelet sends when
// the hook returns (or when its grace runs out) and follows with SIGKILL
// no sooner than 2 s later (MinimumGracePeriod). Once the wait's deadline
// by the rule above falls in the kubelet's last 2 s, or where SIGTERM
// leaves no more than those 2 s anyway (a grace of 1 or 2 s), ending the
// wait later leaves the later phases no less time: then, when their
// reserves fit in the 2 s less the margin the budget keeps of them (at
// most half), the wait's deadline is the budget's SIGKILL, when the
// kubelet gives up on the hook (or its start plus its Max), past the
// budget's deadline, and the later phases are laid out from there to the
// deadline SIGTERM then gives the budget. A wait that ends sooner keeps
// the margin whole.
//
// Deadlines are absolute times computed at the moment they are asked for.
// A Plan is safe for concurrent use.
//
// Make a Plan with NewPlan. The zero Plan has no budget and no phase:
// Budget is nil, Phases and Windows("") are empty, Shortfall is zero, and
// the methods that name a phase panic as for any unknown name, their
// message saying that the Plan was not made by NewPlan.
type Plan struct {
	budget *Budget
	phases []Phase
	index  map[string]int
}

// NewPlan returns a Plan over b with phases in the order they run.
// It fails, naming the field, if b is nil, there are no phases, a name is
// empty or repeated, Max is negative, or a reserve is negative when NewPlan
// evaluates it once (so a negative Fixed reserve is caught here; a live
// reserve that turns negative later counts as zero).
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
		if ph.Max < 0 {
			return nil, fmt.Errorf("deadline: NewPlan: phases[%d].Max (phase %q) must not be negative, got %v", i, ph.Name, ph.Max)
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

// A Window is the time one phase runs under: what a phase asks the Plan for
// when it starts, and what a report shows it ran under.
type Window struct {
	Name  string    `json:"name"`  // the phase's name
	Start time.Time `json:"start"` // when the window was computed: the phase's start
	// Deadline is when the phase must stop starting work: Start <=
	// Deadline <= the budget's deadline, or Start itself once the budget's
	// deadline has passed; but the preStop wait's before SIGTERM, which
	// may run on to the budget's SIGKILL (see Plan).
	Deadline time.Time `json:"deadline"`
	// Hard is when work the phase started must be over: where the window
	// of the next critical phase begins, or else the budget's deadline
	// (for a preStop wait that runs on, the deadline SIGTERM at its end
	// gives the budget).
	// Never before Deadline. Work still running at Deadline may go on
	// until Hard if the phase's policy allows (pause's default, without
	// Config.CancelAtDeadline).
	Hard time.Time `json:"hard"`
	// Reserve is the phase's own reserve, as evaluated.
	Reserve time.Duration `json:"reserve_ns"`
	// Short is how much less than its reserve the phase gets because the
	// time left did not cover every reserve (zero when it did).
	Short time.Duration `json:"short_ns,omitempty"`
}

// Window returns the named phase's window as if the phase started now and
// every earlier phase were over. It panics if the plan has no phase of that
// name: names are fixed at construction, so an unknown one is a programming
// error.
func (p *Plan) Window(name string) Window {
	return p.layout(time.Now(), p.mustIndex(name))[0]
}

// Deadline returns the named phase's deadline as if it started now:
// Window(name).Deadline. A phase that waits for a condition (the preStop
// wait) reads it again after every change, since it follows the live
// reserves. It panics on an unknown name, like Window.
func (p *Plan) Deadline(name string) time.Time { return p.Window(name).Deadline }

// Context returns a context derived from parent whose deadline is the named
// phase's deadline at the time of the call. The context does not follow
// later changes of the reserves or the budget. It panics on an unknown
// name, like Window.
func (p *Plan) Context(parent context.Context, name string) (context.Context, context.CancelFunc) {
	return context.WithDeadline(parent, p.Deadline(name))
}

// Windows returns the window of the named phase and of every later one as
// they would be if that phase started now and each ran to its deadline
// (cut by its Max): the plan laid out ahead, for a log line at SIGTERM.
// Each is the Window its phase gets when it starts there, reserves as they
// are now. With name "" it
// starts at the first phase. It panics on an unknown name, like Window.
func (p *Plan) Windows(name string) []Window {
	i := 0
	if name != "" {
		i = p.mustIndex(name)
	}
	if p.budget == nil { // the zero Plan: no phase to lay out
		return nil
	}
	return p.layout(time.Now(), i)
}

// layout returns the windows of the phases from p.phases[i] on, as if it
// started at now and each ran to its deadline: Split to the budget's
// deadline, but for the preStop wait (preStopLayout).
func (p *Plan) layout(now time.Time, i int) []Window {
	raw := p.budget.raw()
	plain := Split(now, raw.settled().Deadline, p.phases[i:]...)
	if i == 0 {
		if ws := p.preStopLayout(now, raw, plain[0].Deadline); ws != nil {
			return ws
		}
	}
	return plain
}

// preStopLayout is the layout from the first phase, the preStop wait,
// starting at now, when preStopRun says its rule holds (plainEnd is
// where Split to the budget's deadline ends the wait); nil when it does
// not. The wait ends when the kubelet gives up on the hook (or at its
// Max), and the later phases are laid out from there to the deadline
// SIGTERM then gives the budget.
func (p *Plan) preStopLayout(now time.Time, raw State, plainEnd time.Time) []Window {
	end, after, later, lack, ok := p.preStopRun(now, raw)
	if !ok || lack > 0 || after.Sub(end) < raw.ifSIGTERM(plainEnd).Deadline.Sub(plainEnd) {
		return nil // a wait that ends at plainEnd leaves the later phases more: the margin whole
	}
	rest := split(end, after, later)
	wait := Window{Name: p.phases[0].Name, Start: now, Deadline: end, Hard: after, Reserve: reserveOf(p.phases[0])}
	for j, ph := range later { // work the wait started is over where a critical phase begins
		if ph.Critical {
			wait.Hard = rest[j].Start
			break
		}
	}
	return append([]Window{wait}, rest...)
}

// preStopRun lays out, before SIGTERM (raw is the budget's state), the
// first phase, the preStop wait, started at start, run on until the kubelet
// gives up on the hook, and says by how much the reserves do not hold
// there. The kubelet sends SIGTERM when the hook returns, or when its
// grace runs out (raw.Kill, or later), and SIGKILL no sooner than 2 s
// after it: killContainer raises what the hook left to
// minimumGracePeriodInSeconds, and the budget keeps that floor after
// SIGTERM whatever else it learns. So the reserves hold when the wait's
// own fits before its end and the later phases' fit in what SIGTERM there
// leaves them before the deadline it gives the budget (State.ifSIGTERM:
// 2 s less a margin of at most half of them). It returns the wait's end
// (raw.Kill, or start plus its Max), the deadline SIGTERM then gives, the
// later phases with their reserves as evaluated here, fixed, so that the
// wait and the later windows are laid out from the same reserves, and
// lack: how much more time the wait's reserve needs before its end plus
// how much more the later ones need before that deadline (zero: they
// hold), saturated. ok is false, and nothing is laid out, once SIGTERM
// came, or in a plan of one phase.
func (p *Plan) preStopRun(start time.Time, raw State) (end, after time.Time, later []Phase, lack time.Duration, ok bool) {
	if len(p.phases) < 2 || !raw.SIGTERM.IsZero() {
		return end, after, nil, 0, false
	}
	end = raw.Kill
	if m := p.phases[0].Max; m > 0 && end.Sub(start) > m {
		end = start.Add(m)
	}
	later = make([]Phase, len(p.phases)-1)
	reserves := make([]time.Duration, len(later))
	for j, ph := range p.phases[1:] {
		reserves[j] = reserveOf(ph)
		ph.Reserve = Fixed(reserves[j])
		later[j] = ph
	}
	after = raw.ifSIGTERM(end).Deadline
	own := overrunBy([]time.Duration{reserveOf(p.phases[0])}, start, end)
	return end, after, later, satdur.Add(own, overrunBy(reserves, end, after)), true
}

// reserveOf is ph's reserve as evaluated now, a nil or negative one zero.
func reserveOf(ph Phase) time.Duration {
	if ph.Reserve == nil {
		return 0
	}
	return max(ph.Reserve(), 0)
}

// Shortfall returns by how much the budget is too small for all reserves
// together, as of now: how much more time they need in the layout where
// they lack the least, or zero if they fit there. That is sum of reserves
// - (Deadline - T0), or, before SIGTERM, with the first phase, the preStop
// wait, run on to the budget's SIGKILL, where the kubelet gives up on the
// hook and still leaves 2 s after SIGTERM (see Plan), what the wait's
// reserve lacks before SIGKILL plus what the later ones lack before the
// deadline SIGTERM there gives, if that is less. Reserves shorter by the
// figure, in that layout, fit; by any less, they do not. With a preStop
// sleep (Config.PreStopSleep) and no preStop call anchoring the budget,
// the kubelet sleeps from T0 and the phases start at SIGTERM: then it is
// sum of reserves - (Deadline - SIGTERM), the deadline as SIGTERM at T0 +
// sleep sets it before it comes. It saturates at the largest Duration.
func (p *Plan) Shortfall() time.Duration { return p.figure().Short }

// figure is Shortfall with the layout it is counted in (see
// planat.Figure), all from one reading of the budget: drain.New names
// that layout's numbers, and chose it by time arithmetic of its own,
// which named a preStop sleep the plan did not count (a budget a preStop
// call had anchored).
func (p *Plan) figure() planat.Figure {
	if p.budget == nil { // the zero Plan: no reserve to fall short of
		return planat.Figure{}
	}
	raw := p.budget.raw()
	if st, ok := raw.slept(); ok { // the sleep is the kubelet's, no phase's
		return planat.Figure{Short: overrun(p.phases, st.SIGTERM, st.Deadline), Left: st.Deadline.Sub(st.SIGTERM),
			Margin: st.Kill.Sub(st.Deadline), Layout: planat.AfterSleep}
	}
	return p.figureFrom(raw.settled().Start, raw)
}

// figureFrom is what the reserves of every phase lack when the first one
// starts at start (raw is the budget's state), in the layout that lacks
// less: to the budget's deadline, or, before SIGTERM, with the first
// phase, the preStop wait, run on to the budget's SIGKILL. The verdict and
// the figure from the same layout: counted to the deadline alone, a grace
// of 1 s named the 500 ms from T0 for work that lacked only what the
// kubelet's 2 s after SIGTERM do not hold.
func (p *Plan) figureFrom(start time.Time, raw State) planat.Figure {
	st := raw.settled()
	f := planat.Figure{Short: overrun(p.phases, start, st.Deadline), Left: max(st.Deadline.Sub(start), 0),
		Margin: st.Kill.Sub(st.Deadline), Layout: planat.FromT0}
	if end, after, _, lack, ok := p.preStopRun(start, raw); ok && lack < f.Short {
		f = planat.Figure{Short: lack, Left: after.Sub(end), Margin: raw.ifSIGTERM(end).Kill.Sub(after), Layout: planat.RunOn}
	}
	return f
}

// lackFrom is what the reserves of p.phases[i:] lack when phase i starts at
// start (raw is the budget's state): past the budget's deadline, or, for
// the first phase, the preStop wait, by figureFrom's rule.
func (p *Plan) lackFrom(i int, start time.Time, raw State) time.Duration {
	if i == 0 {
		return p.figureFrom(start, raw).Short
	}
	return overrun(p.phases[i:], start, raw.settled().Deadline)
}

// ShortfallFrom returns by how much the reserves of the named phase and all
// later phases exceed the time left now until the budget's Deadline, or
// zero if they fit. Where Shortfall measures the whole plan from T0,
// ShortfallFrom measures what is left when the named phase starts: at
// SIGTERM, ShortfallFrom("preserve") says whether the preStop wait left
// enough. Before the budget's deadline it is positive exactly when
// Window(name) has to share the time left; after it, it also counts the
// time since. For the first phase, the preStop wait, before SIGTERM it is
// what Shortfall is from T0, counted from now: the lesser of that figure
// and what the reserves lack with the wait run on to the budget's SIGKILL
// (see Plan), zero where every reserve is held there. It saturates at the
// largest Duration and panics on an unknown name, like Window.
func (p *Plan) ShortfallFrom(name string) time.Duration {
	i := p.mustIndex(name)
	return p.lackFrom(i, time.Now(), p.budget.raw())
}

// Split lays phases out between start and end by the Plan's rule (see
// Plan) and returns one Window per phase, in order, each as if the phases
// before it ran to their deadlines (cut by their Max): the window of each
// phase is the first window of Split from where the one before it ended,
// so a layout is what each phase gets when it starts there, and time a
// Max leaves unused is shared by the later phases as they would share it
// then. It is the rule a step uses to divide
// its own window among its stages, so that a step keeps no time
// arithmetic of its own. An end before start counts as start. A nil
// Reserve reserves nothing; a negative one, or a negative Max, counts as
// zero.
func Split(start, end time.Time, phases ...Phase) []Window {
	return split(start, laterOf(end, start), phases)
}

// split is Split with end >= start. The reserves are evaluated once, so a
// live reserve that moves while the layout is made cannot make its windows
// disagree with each other.
func split(start, end time.Time, phases []Phase) []Window {
	reserves := make([]time.Duration, len(phases))
	for i, ph := range phases {
		if ph.Reserve != nil {
			reserves[i] = max(ph.Reserve(), 0)
		}
	}
	// Forward: each phase starts where the one before it ends, after that
	// one's Max, and the time left is laid out again from there, as Window
	// does when the phase starts. A layout shared once from start gave a
	// Max-cut phase's time to the next phase alone, where the phase's own
	// Window shares it among all later ones.
	out := make([]Window, len(phases))
	from := start
	for i := range phases {
		out[i] = first(from, end, phases[i:], reserves[i:])
		from = out[i].Deadline
	}
	// Backward: work a phase starts must be over where the next critical
	// phase's window begins.
	hard := end
	for i := len(phases) - 1; i >= 0; i-- {
		out[i].Hard = laterOf(hard, out[i].Deadline)
		if phases[i].Critical {
			hard = out[i].Start
		}
	}
	return out
}

// first returns the window, Hard aside, of phases[0] starting at start with
// the later phases to run before end (>= start), reserves evaluated: its
// deadline is end minus what the later phases get, cut by its Max.
func first(start, end time.Time, phases []Phase, reserves []time.Duration) Window {
	later := reserves
	shared := overrunBy(reserves, start, end) > 0
	if shared {
		later = share(phases, reserves, end.Sub(start))
	}
	// Walk back from end. A time.Time, not a Duration sum, so even absurd
	// reserves cannot overflow; raised to start, so a phase is never asked
	// to end before it began.
	want := end
	for i := len(phases) - 1; i > 0; i-- {
		want = want.Add(-later[i])
	}
	w := Window{Name: phases[0].Name, Start: start, Deadline: laterOf(want, start), Reserve: reserves[0]}
	if shared { // what the phase gets, rounding included, against what it reserves
		w.Short = max(reserves[0]-w.Deadline.Sub(start), 0)
	}
	if m := max(phases[0].Max, 0); m > 0 && w.Deadline.Sub(start) > m {
		w.Deadline = start.Add(m)
	}
	return w
}

// share divides left among phases whose reserves do not fit in it:
// critical phases first, the others in proportion to their reserves.
func share(phases []Phase, reserves []time.Duration, left time.Duration) []time.Duration {
	grant := make([]time.Duration, len(phases))
	var critical, other time.Duration
	for i, ph := range phases {
		if ph.Critical {
			critical = satdur.Add(critical, reserves[i])
		} else {
			other = satdur.Add(other, reserves[i])
		}
	}
	forCritical := min(critical, left)
	forOther := left - forCritical
	for i, ph := range phases {
		if ph.Critical {
			grant[i] = portion(forCritical, reserves[i], critical)
		} else {
			grant[i] = portion(forOther, reserves[i], other)
		}
	}
	return grant
}

// portion is total x part / whole, rounded down, exact for every
// Duration (part <= whole), and zero when whole is zero.
func portion(total, part, whole time.Duration) time.Duration {
	if whole <= 0 || part <= 0 || total <= 0 {
		return 0
	}
	if part >= whole {
		return total
	}
	hi, lo := bits.Mul64(uint64(total), uint64(part))
	q, _ := bits.Div64(hi, lo, uint64(whole)) // hi < whole since part < whole
	return time.Duration(q)
}

// overrun returns by how much the reserves of phases, laid end to end from
// start, run past deadline, or zero.
func overrun(phases []Phase, start, deadline time.Time) time.Duration {
	reserves := make([]time.Duration, len(phases))
	for i, ph := range phases {
		reserves[i] = max(ph.Reserve(), 0)
	}
	return overrunBy(reserves, start, deadline)
}

// overrunBy is overrun over evaluated reserves. The sum is kept as a
// time.Time, exact even for absurd reserves, and the result saturates at
// the largest Duration.
func overrunBy(reserves []time.Duration, start, deadline time.Time) time.Duration {
	end := start
	for _, r := range reserves {
		end = end.Add(r)
	}
	return max(end.Sub(deadline), 0)
}

func (p *Plan) mustIndex(name string) int {
	i, ok := p.index[name]
	if !ok && p.budget == nil {
		panic(fmt.Sprintf("deadline: plan has no phase %q: a zero Plan, not made by deadline.NewPlan, has none", name))
	}
	if !ok {
		panic(fmt.Sprintf("deadline: plan has no phase %q", name))
	}
	return i
}
