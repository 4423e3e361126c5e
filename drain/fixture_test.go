package drain

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// fixture is a node under test: fake sandboxes whose preserve takes a fixed
// time and that never finish on their own (24 h timeouts), a budget, and a
// Drainer over them.
type fixture struct {
	node   *fakesandbox.Node
	budget *deadline.Budget
	d      *Drainer
}

type fixtureOpts struct {
	grace, margin time.Duration
	sandboxes     int
	latency       time.Duration
	limit         int
	steps         []Step
	edit          func(*Config)
	budget        deadline.Config // beyond the margin
}

func newFixture(t *testing.T, o fixtureOpts) *fixture {
	t.Helper()
	bc := o.budget
	bc.Margin = o.margin
	b, err := deadline.New(o.grace, bc)
	require.NoError(t, err)
	node := fakesandbox.NewNode()
	node.AddN("sb", o.sandboxes, o.latency)
	cfg := Config{
		Budget:    b,
		Sandboxes: node,
		Pause:     pause.Config{Limit: max(o.limit, 1), Estimator: deadline.NewEstimator(o.latency)},
		Steps:     o.steps,
	}
	if o.edit != nil {
		o.edit(&cfg)
	}
	if cfg.Preserver != nil {
		cfg.Pause = pause.Config{} // the default Preserver's, which New refuses beside another
	}
	d, err := New(cfg)
	require.NoError(t, err)
	return &fixture{node: node, budget: b, d: d}
}

// preStopCall is one in-flight call of the preStop handler.
type preStopCall struct {
	done chan struct{}
	rec  *httptest.ResponseRecorder
	at   time.Time // when the answer came
}

// callPreStop calls the preStop handler in its own goroutine, as the
// kubelet's httpGet does.
func (f *fixture) callPreStop(ctx context.Context, query string) *preStopCall {
	c := &preStopCall{done: make(chan struct{}), rec: httptest.NewRecorder()}
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/drain"+query, nil)
	go func() {
		defer close(c.done)
		f.d.PreStop().ServeHTTP(c.rec, req)
		c.at = time.Now()
	}()
	return c
}

func (c *preStopCall) wait(t *testing.T) PreStopSummary {
	t.Helper()
	<-c.done
	require.Equal(t, http.StatusOK, c.rec.Code)
	var sum PreStopSummary
	require.NoError(t, json.Unmarshal(c.rec.Body.Bytes(), &sum))
	return sum
}

// recordStep returns a step that appends its name to ran and returns nil.
func recordStep(name string, reserve time.Duration, ran *[]string) Step {
	return step(name, reserve, func(ctx context.Context) error {
		*ran = append(*ran, name)
		return nil
	})
}

// step returns a Step named name with a fixed reserve that calls run.
func step(name string, reserve time.Duration, run func(ctx context.Context) error) Step {
	return stepOf(name, reserve, false, run)
}

func stepOf(name string, reserve time.Duration, critical bool, run func(ctx context.Context) error) Step {
	return NewStep(deadline.Phase{Name: name, Reserve: deadline.Fixed(reserve), Critical: critical},
		func(ctx context.Context) (any, error) { return nil, run(ctx) })
}

// shutdownMeanwhile runs Shutdown and, d into it (in a synctest bubble,
// exactly d), calls meanwhile on the caller's goroutine; it returns
// Shutdown's Report.
func (f *fixture) shutdownMeanwhile(d time.Duration, meanwhile func()) *Report {
	done := make(chan *Report)
	go func() { done <- f.d.Shutdown(context.Background()) }()
	time.Sleep(d)
	meanwhile()
	return <-done
}

// terminate runs the Drainer's signal handling in an in-process child that
// the simulated kubelet terminates with hook and grace, waits until
// everything has settled, and returns the kubelet's timeline and the
// Report. Call it inside synctest.Test.
func (f *fixture) terminate(t *testing.T, hook kubeletsim.Hook, grace time.Duration) (*kubeletsim.Timeline, *Report) {
	t.Helper()
	proc := kubeletsim.NewInProcess()
	var rep *Report
	go func() {
		defer proc.Exit()
		rep = f.d.ServeSignals(context.Background(), proc.Signals())
	}()
	tl, err := kubeletsim.Terminate(context.Background(), proc, hook, grace)
	require.NoError(t, err)
	synctest.Wait()
	require.NotNil(t, rep)
	return tl, rep
}

// logAt makes a Config's Logger write text at level and above into logs.
func logAt(logs *logbuf.Buffer, level slog.Level) func(*Config) {
	return func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level}))
	}
}

// logToDefault makes slog's default logger write text into the Buffer it
// returns until the test ends: for what New and NewServer log before a
// Config's Log is theirs.
func logToDefault(t *testing.T) *logbuf.Buffer {
	t.Helper()
	var logs logbuf.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &logs
}
