package drain

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// apiError is an API client's error: the status of an answer, and the
// transport's error under it. Its methods read the answer, as a client's
// do: a nil *apiError, or one whose answer never came, panics in them.
type apiError struct {
	answer *struct{ status string }
	err    error
}

func (e *apiError) Error() string { return "list sandboxes: " + e.answer.status }
func (e *apiError) Unwrap() error { return e.err }

// listingErrors are errors a Lister may return whose methods panic: a nil
// *apiError (a client's error returned as is when the server answered
// 200, Go's FAQ "Why is my nil error value not equal to nil?"), and one
// whose answer never came.
var listingErrors = []struct {
	name string
	err  error
	says string
}{
	{"typed nil", (*apiError)(nil), "returned a nil *drain.apiError as its error"},
	{"Error panics", &apiError{err: errors.New("connection reset")}, "returned an error (*drain.apiError) whose Error or Unwrap panicked"},
}

// A Lister whose error's methods panic, met by drain's own counts of the
// running sandboxes (the preStop wait's, and the gate phase's when no
// preStop counted), is a count that failed: logged, naming the error's
// type, and the drain goes on. Pause recovers such an error in its own
// listings (rows 1881, 1882); drain's counts read it outside any recover
// (the log line's err.Error()), and the panic ended the process mid-drain,
// every sandbox lost.
//
//	0 s  preStop: the wait's counts get the broken error; logged, the wait goes on
//	5 s  the Lister answers again
//	7 s  the wait counts 3 running
//
// and, with no preStop, Shutdown's gate count gets the broken error, and
// the preserve phase preserves the 3.
func TestAListingErrorWhoseMethodsPanicIsAFailedCountNotACrash(t *testing.T) {
	for _, tc := range listingErrors {
		t.Run(tc.name+", preStop wait", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var broken atomic.Int32
				broken.Store(1 << 30)
				f, logs := brokenListerFixture(t, &broken, tc.err)
				c := f.callPreStop(context.Background(), "")
				time.Sleep(5 * time.Second)
				synctest.Wait()
				assert.Contains(t, logs.String(), tc.says)
				broken.Store(0)
				time.Sleep(2 * time.Second)
				synctest.Wait()
				assert.Equal(t, 3, f.d.Running(), "the count works again")
				assert.Contains(t, logs.String(), "drain: listing running sandboxes works again")
				f.d.Force()
				<-c.done
				f.d.Shutdown(context.Background())
			})
		})
		t.Run(tc.name+", Shutdown's count", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var broken atomic.Int32
				broken.Store(1) // the gate phase's count; the Preserver's listings answer
				f, logs := brokenListerFixture(t, &broken, tc.err)
				rep := f.d.Shutdown(context.Background())
				assert.Contains(t, logs.String(), tc.says)
				require.NotNil(t, rep.Preserve)
				assert.Equal(t, 3, rep.Preserve.Counts[pause.Preserved])
				assert.NoError(t, rep.Err())
			})
		})
	}
}

// brokenListerFixture is a node of 3 sandboxes whose Lister returns them
// with err for as many calls as broken holds, and then without, and the
// log of its Drainer.
func brokenListerFixture(t *testing.T, broken *atomic.Int32, err error) (*fixture, *logbuf.Buffer) {
	var logs logbuf.Buffer
	var f *fixture
	f = newFixture(t, fixtureOpts{grace: time.Hour, sandboxes: 3, latency: time.Second, edit: func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) // which calls an error's Error itself
		c.Sandboxes = pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			sbs, _ := f.node.List(ctx)
			if broken.Add(-1) >= 0 {
				return sbs, err
			}
			broken.Store(0)
			return sbs, nil
		})
	}})
	return f, &logs
}
