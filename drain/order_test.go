package drain

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/pause"
)

// The order of a termination, in the style of k8s.io/apiserver's
// lifecycle-signal tests: checks injected at each stage assert what must
// already hold there, and the recorded order is asserted at the end.
//
//	preStop ---> gate closed, readiness 503 ---> drain deadline ---> SIGTERM
//	  ---> preserve (creates rejected, pauses admitted) ---> ublk (every sandbox preserved)
//	  ---> http (ublk done) ---> Report
func TestTerminationHappensInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var events []string
		record := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
		var f *fixture
		ready := func() int {
			rec := httptest.NewRecorder()
			f.d.Gate().Readiness(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			return rec.Code
		}
		f = newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second, sandboxes: 4, latency: 2 * time.Second, limit: 4,
			edit: func(c *Config) {
				c.Gate = &Gate{Exempt: []Class{Pause}}
				c.Steps = []Step{
					step("ublk", 30*time.Second, func(context.Context) error {
						for _, s := range f.node.Sandboxes() {
							assert.True(t, s.Preserved(), "ublk runs after every consumer is preserved")
						}
						record("ublk")
						return nil
					}),
					step("http", 5*time.Second, func(context.Context) error {
						assert.Contains(t, events, "ublk")
						record("http")
						return nil
					}),
				}
			}})
		var once sync.Once
		f.node.OnList = func(int) {
			select {
			case <-f.d.Terminating(): // a listing inside Shutdown
			default:
				return // a preStop count
			}
			once.Do(func() {
				_, err := f.d.Gate().Enter(Create)
				assert.ErrorIs(t, err, ErrDraining, "no create while preserving")
				leave, err := f.d.Gate().Enter(Pause)
				assert.NoError(t, err, "a pause request still passes")
				if leave != nil {
					leave()
				}
				record("preserve")
			})
		}

		require.Equal(t, http.StatusOK, ready())
		call := f.callPreStop(t.Context(), "")
		synctest.Wait()
		<-f.d.Gate().Draining()
		record("gate closed")
		assert.Equal(t, http.StatusServiceUnavailable, ready(), "readiness turned with the gate")
		call.wait(t)
		record("preStop returned")
		rep := f.d.Shutdown(context.Background())
		record("report")
		assert.Equal(t, []string{"gate closed", "preStop returned", "preserve", "ublk", "http", "report"}, events)
		assert.Equal(t, []string{PhaseDrain, PhaseGate, PhasePreserve, "ublk", "http"}, phaseNames(rep))
	})
}

// hungPreserver ignores its context and the hard deadline.
type hungPreserver struct{ release chan struct{} }

func (h hungPreserver) Run(context.Context, time.Time) *pause.Report {
	<-h.release
	return &pause.Report{}
}

func (hungPreserver) Limit() int                     { return 1 }
func (hungPreserver) Estimator() *deadline.Estimator { return nil }

func TestAPreserverThatIgnoresItsDeadlineIsAbandonedAtTheHardDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var ublkRan bool
		b, err := deadline.New(60*time.Second, deadline.Config{Margin: 5 * time.Second})
		require.NoError(t, err)
		d, err := New(Config{Budget: b, Preserver: hungPreserver{release},
			Steps: []Step{step("ublk", 10*time.Second, func(context.Context) error { ublkRan = true; return nil })}})
		require.NoError(t, err)
		t0 := time.Now()
		rep := d.Shutdown(context.Background())
		close(release)
		p := rep.Phase(PhasePreserve)
		assert.Equal(t, Abandoned, p.Result)
		assert.Equal(t, 55*time.Second+returnSlack, p.End.Sub(t0), "abandoned at the budget's deadline (the hard one)")
		assert.Nil(t, rep.Preserve)
		assert.True(t, ublkRan, "the steps still ran")
		assert.Less(t, rep.End.Sub(t0), 60*time.Second, "before SIGKILL")
	})
}

// phaseCounting is a Step that counts the calls of its Phase.
type phaseCounting struct {
	Step
	calls atomic.Int32
}

func (s *phaseCounting) Phase() deadline.Phase { s.calls.Add(1); return s.Step.Phase() }

// Step.Phase's doc says New calls it once: a step may build its phase
// then, and answer later calls as it likes (or not at all). Before, each
// step's phase ran it again for its name: a step whose Phase named it
// otherwise the second time had the budget's follower look up a phase
// the plan does not have, and panic in its goroutine, mid-drain.
func TestStepPhaseIsReadOnceByNew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &phaseCounting{Step: step("http", time.Second, func(context.Context) error { return nil })}
		f := newFixture(t, fixtureOpts{grace: 10 * time.Second, sandboxes: 1, latency: 100 * time.Millisecond, steps: []Step{s}})
		rep := f.d.Shutdown(context.Background())
		require.NotNil(t, rep.Phase("http"))
		assert.Equal(t, OK, rep.Phase("http").Result)
		assert.Equal(t, int32(1), s.calls.Load(), "Phase called once, by New")
	})
}
