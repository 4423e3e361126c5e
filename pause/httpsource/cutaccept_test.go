package httpsource

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/pipenet"
	"github.com/drainkit/drainkit/pause"
)

// Fault: a pause answered 2xx whose body was cut (row 2361: the status is
// its answer) did not record that the server accepted the key from
// Config.APIKeyFile: do returned before keyFile.accept. That record is what
// tells a sandbox's own refusal (a 403 for it alone) from the key's (a
// rotation the file has not caught up with yet): without it the server's
// 200s said nothing, and one sandbox's 403 was retried as a key not yet
// rotated, its slot held, to the phase deadline. (No request went out with
// an old key: send reads the file again before each.) In virtual time, over
// a real HTTP/1.1 exchange in memory, 6 sandboxes, 2 pauses at once, each
// other pause 100 ms and its 200's body cut, a 60 s phase:
//
//	0 s      a: 403 (a refusal of the key?); b sent with it
//	0.1 s    b: 200, body cut; c sent, after a's 403 came back
//	0.2 s    c: 200, body cut: the key a's 403 refused was accepted since
//	         before: a retried as a key refusal to the phase deadline,
//	                 60 s, 14 attempts, "retried while time is left"
//	         now:    a's next 403 is its own: Failed within 1 s, 3 attempts at most
func TestAKeyAcceptedByAPauseWithACutBodyMakesARefusalPermanent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := pipenet.Listen("sandbox-server.test:80")
		defer ln.Close()
		ids := []string{"a", "b", "c", "d", "e", "f"}
		var paused sync.Map // sandboxID: true once its pause was answered
		go serveCloseDelimited(ln, func(req *http.Request) string {
			if req.Method == http.MethodGet {
				var elems []string
				for _, id := range ids {
					state := "running"
					if _, ok := paused.Load(id); ok {
						state = "paused"
					}
					elems = append(elems, fmt.Sprintf(`{"sandboxID":%q,"state":%q}`, id, state))
				}
				body := "[" + strings.Join(elems, ",") + "]"
				return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			}
			id := strings.Split(req.URL.Path, "/")[2]
			if id == "a" {
				const body = `{"message":"not your sandbox"}`
				return fmt.Sprintf("HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			}
			time.Sleep(100 * time.Millisecond) // the pause's snapshot
			paused.Store(id, true)
			const body = `{"sandboxID":"x","state":"paused","ok":1}`
			answer := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			return answer[:strings.Index(answer, body)+14] // the connection closes mid-body
		})
		_, cfg := keyVolume(t)
		cfg.Client = &http.Client{Transport: &http.Transport{DialContext: ln.Dial}}
		src, err := New("http://sandbox-server.test", cfg)
		require.NoError(t, err)
		p, err := pause.New(src, pause.Config{Limit: 2, Order: pause.OrderFIFO})
		require.NoError(t, err)
		start := time.Now()

		rep := p.Run(ctxWithDeadline(t, 60*time.Second), time.Time{})

		assert.Equal(t, len(ids)-1, rep.Counts[pause.Preserved], "%v", rep.Entries)
		e := entry(t, rep, "a")
		assert.Equal(t, pause.Failed, e.Outcome)
		assert.Contains(t, e.Error, "403 Forbidden")
		assert.NotContains(t, e.Error, "retried while time is left", "the key was accepted after its refusal: the refusal is its own")
		assert.LessOrEqual(t, e.Attempts, 3, "permanent once the key was accepted after its refusal")
		assert.Less(t, e.End.Sub(start), time.Second, "failed when the cut 200s came, not at the phase deadline")
		t.Logf("a: %d attempts, failed at +%v: %s", e.Attempts, e.End.Sub(start), e.Error)
	})
}
