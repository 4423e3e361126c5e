package drain

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// A Lister that hangs (an API server that never answers) during an hour's
// preStop wait is said in the log every progress interval, at Warn the
// first time. Fault: the count waited for it to the drain deadline, and
// the wait's progress lines with it: after "gate closed, waiting for
// running sandboxes", nothing in the log for 59 minutes.
func TestAListingThatHangsDuringThePreStopWaitIsSaid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: time.Hour, latency: time.Second, edit: func(c *Config) {
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			c.Sandboxes = pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			})
		}})
		c := f.callPreStop(context.Background(), "")
		time.Sleep(25 * time.Second)
		synctest.Wait()
		lines := logs.String()
		assert.Contains(t, lines, `level=WARN msg="drain: listing running sandboxes has not returned: until it does, or fails at its deadline, the plan keeps one round of preserves (no count yet)" waited=10s`)
		assert.Contains(t, lines, `level=INFO msg="drain: listing running sandboxes has not returned: until it does, or fails at its deadline, the plan keeps one round of preserves (no count yet)" waited=20s`)
		assert.Equal(t, 2, strings.Count(lines, "has not returned"), "one line every progress interval:\n%s", lines)
		f.d.Force()
		<-c.done
		f.d.Shutdown(context.Background())
		synctest.Wait()
		assert.Equal(t, 2, strings.Count(logs.String(), "has not returned"), "none once the listing returned")
	})
}

// The same Lister that answered once (2 running) and then hangs: the line
// says the plan counts those 2.
func TestAListingThatHangsAfterACountSaysTheCountStands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		var f *fixture
		calls := 0
		f = newFixture(t, fixtureOpts{grace: time.Hour, sandboxes: 2, latency: time.Second, edit: func(c *Config) {
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			c.Sandboxes = pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
				if calls++; calls == 1 {
					return f.node.List(ctx)
				}
				<-ctx.Done()
				return nil, ctx.Err()
			})
		}})
		c := f.callPreStop(context.Background(), "")
		time.Sleep(15 * time.Second)
		synctest.Wait()
		assert.Contains(t, logs.String(), `level=WARN msg="drain: listing running sandboxes has not returned: until it does, or fails at its deadline, the plan counts the last count's 2 running" waited=10s`)
		f.d.Force()
		<-c.done
		f.d.Shutdown(context.Background())
		synctest.Wait()
	})
}
