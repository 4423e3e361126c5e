package httpsource

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: a pause that got no answer (its timeout, Config.PauseTimeout,
// cut it while the server went on with it) and whose sandbox the next
// pause then found paused, a 409 that listing again settles (the generic
// shape: no longer listed running), was taken for a sandbox someone else
// had paused: pause.ErrGone, Vanished in the Report ("already gone or
// preserved when its turn came"), where the Source's own pause had
// preserved it. With Config.RetryConflict a 409 naming the state paused
// after such a pause was already counted preserved. In virtual time, over
// a real HTTP/1.1 exchange in memory:
//
//	0 s    pause a, pause timeout 1 s; the server pauses for 2 s
//	1 s    no answer before the pause timeout
//	2 s    the server has paused a
//	3 s    pause a again: 409, and a listed paused
//	       before: gone (Vanished); now preserved, by the pause at 0 s
func TestConflictAfterAPauseThatGotNoAnswerIsThatPausesSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(1, func(f *fakeServer) { f.pauseDelay = 2 * time.Second })
		src := sourceInMemory(t, &http.Server{Handler: f.handler()}, &http.Transport{}, Config{PauseTimeout: time.Second})
		a := src.Sandbox(sandboxID(0))

		err := a.Preserve(ctxWithDeadline(t, time.Minute))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no answer before the pause timeout")
		time.Sleep(2 * time.Second)
		require.Equal(t, "paused", f.state(sandboxID(0)), "the server went on with the pause")

		assert.NoError(t, a.Preserve(ctxWithDeadline(t, time.Minute)), "preserved by the pause that got no answer")
		assert.Equal(t, 2, f.pauseRequests()[sandboxID(0)])
	})
}
