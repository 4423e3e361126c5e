package deadline_test

import (
	"encoding/binary"
	"math"
	"math/big"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/drainkit/drainkit/deadline"
)

// decodePhases turns fuzz bytes into up to 16 phases after a first phase
// "p0" with no reserve, 3 bytes each: a 16-bit count, then a byte whose
// low two bits pick the reserve's unit (ms, s, min, or 2^47 ns, so that a
// single reserve comes close to the largest Duration), bit 2 marks the
// phase Critical, and the top five bits are its Max in units of 100 ms
// (zero: no Max).
func decodePhases(raw []byte) []deadline.Phase {
	units := [4]time.Duration{time.Millisecond, time.Second, time.Minute, 1 << 47}
	out := []deadline.Phase{{Name: "p0"}}
	for len(raw) >= 3 && len(out) <= 16 {
		v := time.Duration(binary.LittleEndian.Uint16(raw))
		flags := raw[2]
		out = append(out, deadline.Phase{
			Name:     "p" + string(rune('a'+len(out)-1)),
			Reserve:  deadline.Fixed(v * units[flags%4]),
			Critical: flags&4 != 0,
			Max:      time.Duration(flags>>3) * 100 * time.Millisecond,
		})
		raw = raw[3:]
	}
	return out
}

// FuzzPlanInvariants checks the Plan and Split against an exact model of
// the rule in the Plan's documentation, for any budget history (preStop at
// T0, optional Tighten, optional SIGTERM, windows laid out at SIGTERM or at
// any time before it, even past the budget's deadline) and any reserves,
// critical marks and Max values. The model works in math/big, so it
// overflows nowhere:
//
//   - New fails exactly for a grace <= 0 or an explicit margin that is
//     negative or not below the grace; the default margin always fits;
//   - the budget keeps T0 <= Deadline <= Kill and Kill >= SIGTERM + 2 s;
//   - Start_0 = start and Start_i = Deadline_(i-1): each phase's window is
//     the first window of phases i.. laid out from Start_i (what Window
//     gives the phase when it starts there), where, with left = end -
//     Start_i (zero if negative): when the reserves of phases i.. fit,
//     each gets its reserve; otherwise critical phases get theirs first
//     (or share left in proportion if even they do not fit) and the others
//     share the rest in proportion, rounded down;
//   - Deadline_i = end - grants of phases i+1.., then cut to Start_i + Max;
//     Hard_i = the Start of the next critical phase, else end, never
//     before Deadline_i; Short_i = reserve - (Deadline_i - Start_i) before
//     the Max cut; deadlines never decrease;
//   - Window(name) is the model over the phases from name on, Windows(name)
//     lays them out, Split from any start to any end agrees; but before
//     SIGTERM, the first phase's, the preStop wait's, is preStopModel
//     where its rule holds (the wait run on to SIGKILL, the kubelet's 2 s
//     after SIGTERM holding the later reserves); ShortfallFrom it is
//     Shortfall's rule counted from now: the lesser of the figure to D and
//     what the reserves lack with the wait run on;
//   - Shortfall == sum of all reserves - (D - T0) when positive, else 0,
//     but before SIGTERM, when less, what the reserves lack with the wait
//     run on (the wait's before SIGKILL, the later ones' before the
//     deadline SIGTERM there gives), 0 where they hold there; and it is
//     exact: the reserves less it, taken off the last phases, fit, and
//     less it but 1 ns lack 1 ns;
//     when ShortfallFrom is zero no phase of the layout is Short, and with
//     no Max it is positive exactly when one is (a Max-cut phase may leave
//     the later ones enough).
func FuzzPlanInvariants(f *testing.F) {
	f.Add(int64(3600e9), int64(5e9), int64(-1), int64(-1), []byte{0x58, 0x02, 1, 0x3c, 0, 1})
	// The drain-shaped plan after an overrunning hook: 1 s for 3 s + critical 600 ms + 1 s.
	f.Add(int64(30e9), int64(-1), int64(30500e6), int64(-1), []byte{0, 0, 20, 3, 0, 1, 0x58, 0x02, 4, 1, 0, 1})
	f.Fuzz(func(t *testing.T, grace, margin, sigtermAfter, tightenTo int64, raw []byte) {
		g := time.Duration(grace)
		var c deadline.Config
		if margin > 0 {
			c.Margin = time.Duration(margin)
		}
		b, err := deadline.New(g, c)
		if wantErr := g <= 0 || (margin > 0 && margin >= grace); (err != nil) != wantErr {
			t.Fatalf("New(%v, margin %v): err = %v, want error %v", g, time.Duration(margin), err, wantErr)
		}
		if err != nil {
			return
		}
		if margin <= 0 && b.Margin() != deadline.DefaultMarginFor(g) {
			t.Fatalf("default margin %v, want DefaultMarginFor(%v) = %v", b.Margin(), g, deadline.DefaultMarginFor(g))
		}
		phases := decodePhases(raw)
		synctest.Test(t, func(t *testing.T) {
			t0 := time.Now()
			b.OnPreStop(t0)
			if tightenTo >= 0 {
				b.Tighten(t0.Add(time.Duration(tightenTo)))
			}
			if sigtermAfter >= 0 {
				b.OnSIGTERM(t0.Add(time.Duration(sigtermAfter)))
				time.Sleep(time.Duration(sigtermAfter)) // lay the plan out at SIGTERM
			} else {
				time.Sleep(time.Duration(-(sigtermAfter + 1))) // or during the preStop wait
			}
			st := b.State()
			if st.Deadline.Before(st.Start) || st.Deadline.After(st.Kill) {
				t.Fatalf("budget deadline %v outside [T0 %v, SIGKILL %v]", st.Deadline, st.Start, st.Kill)
			}
			if !st.SIGTERM.IsZero() && st.Kill.Before(st.SIGTERM.Add(deadline.MinimumGracePeriod)) {
				t.Fatalf("SIGKILL %v less than 2 s after SIGTERM %v", st.Kill, st.SIGTERM)
			}

			p, err := deadline.NewPlan(b, phases...)
			if err != nil {
				t.Fatal(err)
			}
			now, D, T0 := time.Now(), st.Deadline, st.Start
			// Before SIGTERM the first phase is the preStop wait.
			preStop := func(from time.Time) ([]deadline.Window, []unpinned, time.Time, bool) {
				if sigtermAfter >= 0 {
					return nil, nil, time.Time{}, false
				}
				plain, _ := splitModel(phases, from, D)
				return preStopModel(phases, from, st, c.Margin, plain[0].Deadline)
			}
			checkFirst := func(what string, got []deadline.Window) {
				if want, open, end, ok := preStop(now); ok {
					compareLayout(t, what, phases, now, end, got, want, open)
					return
				}
				checkLayout(t, what, phases, now, D, got)
			}
			checkFirst("Windows(\"\")", p.Windows(""))
			for i, ph := range phases {
				ws := p.Windows(ph.Name)
				if i == 0 {
					checkFirst("Windows("+ph.Name+")", ws)
				} else {
					checkLayout(t, "Windows("+ph.Name+")", phases[i:], now, D, ws)
				}
				if w := p.Window(ph.Name); w != ws[0] {
					t.Fatalf("Window(%s) = %+v, Windows(%s)[0] = %+v", ph.Name, w, ph.Name, ws[0])
				}
				if got := p.Deadline(ph.Name); !got.Equal(ws[0].Deadline) {
					t.Fatalf("Deadline(%s) = %v, Window says %v", ph.Name, got, ws[0].Deadline)
				}
				short := false
				for _, w := range ws {
					short = short || w.Short > 0
				}
				sf := p.ShortfallFrom(ph.Name)
				want := shortfall(sumReserves(phases[i:]), now, D)
				runOn := false // the preStop wait before SIGTERM: the layout that lacks less, as Shortfall's
				if _, _, lack, ok := preStopLackModel(phases, now, st, c.Margin); ok && i == 0 && sigtermAfter < 0 {
					runOn, want = lack < want, min(want, lack)
				}
				if sf != want {
					t.Fatalf("ShortfallFrom(%s) = %v, want %v", ph.Name, sf, want)
				}
				// Past the deadline ShortfallFrom counts the time already
				// lost even when no reserve is left to share it. The
				// run-on layout's figure is not the shares of the layout
				// to the deadline.
				if (sf > 0) != short && !now.After(D) && (sf == 0 || !anyMax(phases[i:])) && !(runOn && sf > 0) {
					t.Fatalf("ShortfallFrom(%s) = %v, but a phase is short: %v", ph.Name, sf, short)
				}
			}
			checkLayout(t, "Split(T0, D)", phases, T0, D, deadline.Split(T0, D, phases...))
			checkLayout(t, "Split(D, T0)", phases, D, T0, deadline.Split(D, T0, phases...))

			want := shortfall(sumReserves(phases), T0, D)
			if _, _, lack, ok := preStopLackModel(phases, T0, st, c.Margin); ok && sigtermAfter < 0 {
				want = min(want, lack) // the layout that lacks less: the preStop wait run on
			}
			got := p.Shortfall()
			if got != want {
				t.Fatalf("Shortfall = %v, want %v (reserves %v, from %v to %v)", got, want, sumReserves(phases), T0, D)
			}
			checkShortfallIsExact(t, b, phases, got)
		})
	})
}

// checkLayout compares got, the windows of phases laid out from start to
// end, with splitModel, and checks the invariants that follow from it.
func checkLayout(t *testing.T, what string, phases []deadline.Phase, start, end time.Time, got []deadline.Window) {
	t.Helper()
	want, open := splitModel(phases, start, end)
	compareLayout(t, what, phases, start, end, got, want, open)
}

// compareLayout compares got with want, the model's layout of phases from
// start to end, in the fields open leaves pinned, and checks the
// invariants that follow from it.
func compareLayout(t *testing.T, what string, phases []deadline.Phase, start, end time.Time, got, want []deadline.Window, open []unpinned) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d windows for %d phases", what, len(got), len(want))
	}
	for i, w := range got {
		m := want[i]
		switch {
		case w.Name != phases[i].Name:
			t.Fatalf("%s: window %d is %q, phase is %q", what, i, w.Name, phases[i].Name)
		case !open[i].deadline && !w.Deadline.Equal(m.Deadline):
			t.Fatalf("%s: %s Deadline = %v, model %v (start %v, end %v)", what, w.Name, w.Deadline, m.Deadline, start, end)
		case w.Reserve != m.Reserve || !open[i].short && w.Short != m.Short:
			t.Fatalf("%s: %s Reserve, Short = %v, %v; model %v, %v", what, w.Name, w.Reserve, w.Short, m.Reserve, m.Short)
		case !open[i].start && !w.Start.Equal(m.Start):
			t.Fatalf("%s: %s Start = %v, model %v", what, w.Name, w.Start, m.Start)
		case !open[i].hard && !w.Hard.Equal(m.Hard):
			t.Fatalf("%s: %s Hard = %v, model %v", what, w.Name, w.Hard, m.Hard)
		case w.Hard.Before(w.Deadline) || w.Deadline.Before(w.Start) || w.Start.Before(start) || w.Hard.After(laterOf(start, end)):
			t.Fatalf("%s: %s window out of order: %+v (start %v, end %v)", what, w.Name, w, start, end)
		case i > 0 && w.Deadline.Before(got[i-1].Deadline):
			t.Fatalf("%s: %s Deadline %v before %s's %v", what, w.Name, w.Deadline, got[i-1].Name, got[i-1].Deadline)
		}
	}
	if last := got[len(got)-1]; !open[len(got)-1].deadline && phases[len(got)-1].Max == 0 && !last.Deadline.Equal(laterOf(start, end)) {
		t.Fatalf("%s: the last phase ends at %v, not at the end %v", what, last.Deadline, laterOf(start, end))
	}
}

// unpinned says which fields of a modelled window the documentation
// leaves open.
type unpinned struct{ start, deadline, hard, short bool }

var maxDuration = big.NewInt(math.MaxInt64)

// anyMax reports whether a phase has a Max.
func anyMax(phases []deadline.Phase) bool {
	for _, ph := range phases {
		if ph.Max > 0 {
			return true
		}
	}
	return false
}

// splitModel is the Plan's rule in exact arithmetic: each phase's window
// is the first one of the phases from it on, laid out from where the phase
// before it ended (its Max cut included).
func splitModel(phases []deadline.Phase, start, end time.Time) ([]deadline.Window, []unpinned) {
	if end.Before(start) {
		end = start
	}
	n := len(phases)
	open := make([]unpinned, n)
	// split and share in plan.go hold the time left, the critical reserves
	// and the other reserves in Durations that saturate: past the largest
	// Duration (292 years) the shares are no longer proportional (the
	// later phases get too much and the earlier ones are cut to nothing)
	// and a window longer than that leaves its excess to the first phase.
	// Until those sums are exact, the model pins nothing but the
	// invariants there. A layout from a later start, of fewer phases, sums
	// no more.
	critical, other := new(big.Int), new(big.Int)
	for _, ph := range phases {
		if ph.Critical {
			critical.Add(critical, big.NewInt(int64(reserveOf(ph))))
		} else {
			other.Add(other, big.NewInt(int64(reserveOf(ph))))
		}
	}
	left := new(big.Int).Sub(bigNanos(end), bigNanos(start))
	if critical.Cmp(maxDuration) > 0 || other.Cmp(maxDuration) > 0 || left.Cmp(maxDuration) > 0 {
		for i := range open {
			open[i] = unpinned{start: true, deadline: true, hard: true, short: true}
		}
	}
	out := make([]deadline.Window, n)
	from := start
	for i := range phases {
		out[i] = firstModel(phases[i:], from, end)
		from = out[i].Deadline
	}
	hard := end
	for i := n - 1; i >= 0; i-- {
		out[i].Hard = laterOf(hard, out[i].Deadline)
		if phases[i].Critical {
			hard = out[i].Start
		}
	}
	return out, open
}

// preStopModel is the plan's layout from the first phase, the preStop
// wait, before SIGTERM, in exact arithmetic, where its rule holds (ok):
// where preStopFitModel says every reserve holds with the wait run on, and
// that leaves the later phases no less time than SIGTERM at plain, where
// splitModel ends the wait, would (after(wait) - wait >= after(plain) -
// plain). The wait then runs until SIGKILL (or its start plus its Max),
// and the later phases are laid out from there to after(wait), end,
// splitModel's way. margin is Config.Margin (zero: the default).
func preStopModel(phases []deadline.Phase, start time.Time, st deadline.State, margin time.Duration, plain time.Time) (ws []deadline.Window, open []unpinned, end time.Time, ok bool) {
	wait, end, fits := preStopFitModel(phases, start, st, margin)
	left := new(big.Int).Sub(bigNanos(end), bigNanos(wait))
	if !fits || left.Cmp(new(big.Int).Sub(bigNanos(afterModel(st, margin, plain)), bigNanos(plain))) < 0 {
		return nil, nil, end, false
	}
	rest, restOpen := splitModel(phases[1:], wait, end)
	first := deadline.Window{Name: phases[0].Name, Start: start, Deadline: wait, Hard: end, Reserve: reserveOf(phases[0])}
	for j, ph := range phases[1:] {
		if ph.Critical {
			first.Hard = rest[j].Start
			break
		}
	}
	return append([]deadline.Window{first}, rest...), append([]unpinned{{hard: restOpen[0].start}}, restOpen...), end, true
}

// checkShortfallIsExact checks that short, the plan's Shortfall, is the
// time the reserves of phases lack: taken off the last phases' reserves,
// the plan over b fits, and 1 ns less taken off leaves it 1 ns short. A
// saturated figure, or one the reserves cannot give up, names no exact
// time.
func checkShortfallIsExact(t *testing.T, b *deadline.Budget, phases []deadline.Phase, short time.Duration) {
	t.Helper()
	if short == 0 || short == math.MaxInt64 || sumReserves(phases).Cmp(big.NewInt(int64(short))) < 0 {
		return
	}
	for _, c := range []struct{ off, want time.Duration }{{short, 0}, {short - 1, 1}} {
		p, err := deadline.NewPlan(b, lessBy(phases, c.off)...)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Shortfall(); got != c.want {
			t.Fatalf("Shortfall %v: the reserves %v less are %v short, want %v", short, c.off, got, c.want)
		}
	}
}

// lessBy returns phases with off taken off their reserves, from the last
// phase back.
func lessBy(phases []deadline.Phase, off time.Duration) []deadline.Phase {
	out := slices.Clone(phases)
	for i := len(out) - 1; i >= 0 && off > 0; i-- {
		r := reserveOf(out[i])
		cut := min(r, off)
		out[i].Reserve, off = deadline.Fixed(r-cut), off-cut
	}
	return out
}

// preStopLackModel is how much more time the reserves need with the
// preStop wait run on, as preStopFitModel lays it out: the wait's own
// before wait, the later ones' in end - wait, saturated; ok is false where
// no wait runs on (a plan of one phase).
func preStopLackModel(phases []deadline.Phase, start time.Time, st deadline.State, margin time.Duration) (wait, end time.Time, lack time.Duration, ok bool) {
	if len(phases) < 2 {
		return wait, end, 0, false
	}
	wait, end, _ = preStopFitModel(phases, start, st, margin)
	own := shortfall(big.NewInt(int64(reserveOf(phases[0]))), start, wait)
	later := shortfall(sumReserves(phases[1:]), wait, end)
	if own > math.MaxInt64-later {
		return wait, end, math.MaxInt64, true
	}
	return wait, end, own + later, true
}

// preStopFitModel says whether, before SIGTERM, every reserve holds with the
// preStop wait, started at start, run on to SIGKILL as the budget st has
// it (or its start plus its Max), wait, when the kubelet gives up on the
// hook: its own reserve before wait, the later ones in after(wait) - wait.
// The kubelet sends SIGKILL no sooner than 2 s after SIGTERM.
func preStopFitModel(phases []deadline.Phase, start time.Time, st deadline.State, margin time.Duration) (wait, end time.Time, fits bool) {
	if len(phases) < 2 {
		return wait, end, false
	}
	wait = st.Kill
	if m := phases[0].Max; m > 0 && wait.Sub(start) > m {
		wait = start.Add(m)
	}
	end = afterModel(st, margin, wait)
	ownFits := new(big.Int).Sub(bigNanos(wait), bigNanos(start)).Cmp(big.NewInt(int64(reserveOf(phases[0])))) >= 0
	laterFit := new(big.Int).Sub(bigNanos(end), bigNanos(wait)).Cmp(sumReserves(phases[1:])) >= 0
	return wait, end, ownFits && laterFit
}

// afterModel is the budget's deadline after SIGTERM at sigterm, at the
// least: the later of SIGKILL as st has it and SIGTERM + 2 s, less the
// margin (Config.Margin, or the default of the grace in use then), at most
// half the time from SIGTERM.
func afterModel(st deadline.State, margin time.Duration, sigterm time.Time) time.Time {
	kill := laterOf(st.Kill, sigterm.Add(deadline.MinimumGracePeriod))
	if margin <= 0 {
		margin = deadline.DefaultMarginFor(min(st.Grace, kill.Sub(st.Start)))
	}
	return kill.Add(-min(margin, kill.Sub(sigterm)/2))
}

// firstModel is the window, Hard aside, of phases[0] starting at start
// with the later phases to run before end (>= start).
func firstModel(phases []deadline.Phase, start, end time.Time) deadline.Window {
	s, e := bigNanos(start), bigNanos(end)
	left := new(big.Int).Sub(e, s)
	n := len(phases)
	reserves := make([]*big.Int, n)
	critical, other := new(big.Int), new(big.Int)
	for i, ph := range phases {
		reserves[i] = big.NewInt(int64(reserveOf(ph)))
		if ph.Critical {
			critical.Add(critical, reserves[i])
		} else {
			other.Add(other, reserves[i])
		}
	}
	grants := reserves
	shared := new(big.Int).Add(critical, other).Cmp(left) > 0
	if shared {
		forCritical := new(big.Int).Set(critical)
		if forCritical.Cmp(left) > 0 {
			forCritical.Set(left)
		}
		forOther := new(big.Int).Sub(left, forCritical)
		grants = make([]*big.Int, n)
		for i, ph := range phases {
			total, whole := forOther, other
			if ph.Critical {
				total, whole = forCritical, critical
			}
			grants[i] = new(big.Int)
			if whole.Sign() > 0 {
				grants[i].Mul(total, reserves[i]).Quo(grants[i], whole)
			}
		}
	}
	dl := new(big.Int).Set(e)
	for _, g := range grants[1:] {
		dl.Sub(dl, g)
	}
	if dl.Cmp(s) < 0 {
		dl.Set(s)
	}
	w := deadline.Window{Name: phases[0].Name, Start: start, Deadline: fromBigNanos(dl),
		Reserve: time.Duration(reserves[0].Int64())}
	got := new(big.Int).Sub(dl, s)
	if short := new(big.Int).Sub(reserves[0], got); shared && short.Sign() > 0 {
		// What the phase gets short of its reserve: the first phase also
		// gets what rounding left over.
		w.Short = time.Duration(short.Int64())
	}
	if m := phases[0].Max; m > 0 && got.Cmp(big.NewInt(int64(m))) > 0 {
		w.Deadline = start.Add(m)
	}
	return w
}

func laterOf(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// reserveOf is ph's reserve as the Plan counts it: nil and negative are zero.
func reserveOf(ph deadline.Phase) time.Duration {
	if ph.Reserve == nil {
		return 0
	}
	return max(ph.Reserve(), 0)
}

// sumReserves is the exact sum of the phases' reserves, as evaluated now.
func sumReserves(phases []deadline.Phase) *big.Int {
	sum := new(big.Int)
	for _, ph := range phases {
		sum.Add(sum, big.NewInt(int64(reserveOf(ph))))
	}
	return sum
}

// shortfall is reserves - (to - from) if positive, else zero, saturated
// at the largest Duration.
func shortfall(reserves *big.Int, from, to time.Time) time.Duration {
	excess := new(big.Int).Sub(reserves, new(big.Int).Sub(bigNanos(to), bigNanos(from)))
	switch {
	case excess.Sign() <= 0:
		return 0
	case excess.IsInt64():
		return time.Duration(excess.Int64())
	}
	return math.MaxInt64
}

// fromBigNanos is the time n nanoseconds after the Unix epoch, in UTC.
func fromBigNanos(n *big.Int) time.Time {
	sec, nsec := new(big.Int).DivMod(n, big.NewInt(1e9), new(big.Int))
	return time.Unix(sec.Int64(), nsec.Int64()).UTC()
}

// bigNanos is t in nanoseconds since the Unix epoch, without overflow.
func bigNanos(t time.Time) *big.Int {
	n := new(big.Int).Mul(big.NewInt(t.Unix()), big.NewInt(1e9))
	return n.Add(n, big.NewInt(int64(t.Nanosecond())))
}
