package deadline_test

import (
	"encoding/binary"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/drainkit/drainkit/deadline"
)

// decodeReserves turns fuzz bytes into up to 16 reserves, 3 bytes each: a
// 16-bit count and a unit (ms, s, min, or 2^47 ns, so sums can overflow a
// Duration).
func decodeReserves(raw []byte) []time.Duration {
	units := [4]time.Duration{time.Millisecond, time.Second, time.Minute, 1 << 47}
	var out []time.Duration
	for len(raw) >= 3 && len(out) < 16 {
		v := time.Duration(binary.LittleEndian.Uint16(raw))
		out = append(out, v*units[raw[2]%4])
		raw = raw[3:]
	}
	return out
}

// FuzzPlanInvariants checks the Plan against its specification for any
// budget history (preStop at T0, optional SIGTERM, optional Tighten) and any
// fixed reserves:
//
//   - T0 <= phase deadline <= budget Deadline, deadlines never decrease,
//     the last phase ends at the budget Deadline;
//   - D - d_i == sum of later reserves whenever that sum <= D - T0 (later
//     reserves honoured), else d_i == T0;
//   - Shortfall == sum of all reserves - (D - T0) when positive, else 0.
func FuzzPlanInvariants(f *testing.F) {
	f.Add(int64(3600e9), int64(5e9), int64(-1), int64(-1), []byte{0x58, 0x02, 1, 0x3c, 0, 1})
	f.Fuzz(func(t *testing.T, grace, margin, sigtermAfter, tightenTo int64, raw []byte) {
		g := time.Duration(grace)
		b, err := deadline.New(g, deadline.WithMargin(time.Duration(margin)))
		if err != nil {
			if g > 0 && margin >= 0 && margin < grace {
				t.Fatalf("New(%v, margin %v) failed: %v", g, time.Duration(margin), err)
			}
			return
		}
		t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
		b.OnPreStop(t0)
		if tightenTo >= 0 {
			b.Tighten(t0.Add(time.Duration(tightenTo)))
		}
		if sigtermAfter >= 0 {
			b.OnSIGTERM(t0.Add(time.Duration(sigtermAfter)))
		}
		st := b.State()
		if st.Deadline.Before(st.Start) || st.Deadline.After(st.Kill) {
			t.Fatalf("budget deadline %v outside [T0 %v, SIGKILL %v]", st.Deadline, st.Start, st.Kill)
		}
		if !st.SIGTERM.IsZero() && st.Kill.Before(st.SIGTERM.Add(deadline.MinimumGracePeriod)) {
			t.Fatalf("SIGKILL %v less than 2 s after SIGTERM %v", st.Kill, st.SIGTERM)
		}

		reserves := decodeReserves(raw)
		phases := []deadline.Phase{{Name: "p0"}}
		for i, r := range reserves {
			phases = append(phases, deadline.Phase{Name: "p" + string(rune('a'+i)), Reserve: deadline.Fixed(r)})
		}
		p, err := deadline.NewPlan(b, phases...)
		if err != nil {
			t.Fatal(err)
		}
		ws := p.Windows()
		D, T0 := st.Deadline, st.Start
		span := new(big.Int).Sub(bigNanos(D), bigNanos(T0)) // exact, even beyond a Duration
		later := new(big.Int)
		for i := len(ws) - 1; i >= 0; i-- {
			d := ws[i].Deadline
			if d.Before(T0) || d.After(D) {
				t.Fatalf("phase %d deadline %v outside [T0 %v, D %v]", i, d, T0, D)
			}
			if i > 0 && ws[i-1].Deadline.After(d) {
				t.Fatalf("phase %d deadline %v before phase %d's %v", i, d, i-1, ws[i-1].Deadline)
			}
			if later.Cmp(span) <= 0 {
				if got := new(big.Int).Sub(bigNanos(D), bigNanos(d)); got.Cmp(later) != 0 {
					t.Fatalf("phase %d: D - d = %v, later reserves %v fit in %v", i, got, later, span)
				}
			} else if !d.Equal(T0) {
				t.Fatalf("phase %d: later reserves %v exceed %v but deadline %v is after T0", i, later, span, d)
			}
			later.Add(later, big.NewInt(int64(ws[i].Reserve)))
		}
		if !ws[len(ws)-1].Deadline.Equal(D) {
			t.Fatalf("last phase ends at %v, not the budget deadline %v", ws[len(ws)-1].Deadline, D)
		}
		excess := new(big.Int).Sub(later, span)
		want := time.Duration(0)
		if excess.Sign() > 0 {
			want = math.MaxInt64
			if excess.IsInt64() {
				want = time.Duration(excess.Int64())
			}
		}
		if got := p.Shortfall(); got != want {
			t.Fatalf("Shortfall = %v, want %v (reserves %v, span %v)", got, want, later, span)
		}
	})
}

// bigNanos is t in nanoseconds since the Unix epoch, without overflow.
func bigNanos(t time.Time) *big.Int {
	n := new(big.Int).Mul(big.NewInt(t.Unix()), big.NewInt(1e9))
	return n.Add(n, big.NewInt(int64(t.Nanosecond())))
}
