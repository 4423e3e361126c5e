package drain

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
)

// A step follows the budget as the gate and preserve phases do (row 235; row 369):
// with no sandboxes the first step starts at once after SIGTERM, and the
// pod read that lands 100 ms later (a deletion of 3 s, the manifest's 60 s)
// must end it at its new deadline, leaving the critical step after it its
// reserve before SIGKILL.
func TestStepFollowsAReadLandingDuringIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		api.Delete(time.Now(), 3*time.Second)
		slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(100 * time.Millisecond)
			api.ServeHTTP(w, r)
		})
		pod := podOver(t, api, handlerTransport{slow})
		var ublkAt time.Time
		server := step("http", 500*time.Millisecond, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		ublk := stepOf("ublk", 500*time.Millisecond, true, func(ctx context.Context) error { ublkAt = time.Now(); return nil })
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, steps: []Step{server, ublk},
			edit: func(c *Config) { c.Pod = pod }})
		rep := f.d.Shutdown(context.Background())
		kill := rep.Budget.SIGTERM.Add(3 * time.Second).Truncate(time.Second)
		require.True(t, rep.Budget.Kill.Equal(kill), "the deletion's SIGKILL %v, not %v", kill, rep.Budget.Kill)
		assert.True(t, ublkAt.Before(kill.Add(-500*time.Millisecond)), "ublk started at %v, SIGKILL %v", ublkAt.Sub(rep.Budget.SIGTERM), kill.Sub(rep.Budget.SIGTERM))
		assert.Positive(t, rep.Headroom, "exit before SIGKILL")
	})
}
