package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/gaterefusals"
)

// Fault (the gate review): sandboxd's API answers JSON, {"error": "..."} for every
// failure, but the gate's refusal of a create while it drained was the gate's plain
// text, "drain: node is draining, not accepting new work (create)", so a client that
// decodes the answer's JSON to learn what to do got a decode error, not the refusal,
// and a resume of a sandbox not here got the same text. Each is JSON now, saying to
// retry on another node after the Retry-After; the connection still closed, so that
// the retry goes to a node still ready. On loopback:
//
//	the preStop call closes the gate
//	create:                  before, text/plain, the gate's words
//	                         now, 503 JSON {"error": "... retry on another node ..."},
//	                         Retry-After, Connection: close
//	resume of one not here:  the same, naming it
//	the Report:              both counted refused, as before
func TestRefusalsWhileDrainingAreJSONSayingRetryElsewhere(t *testing.T) {
	st := start(t, testConfig(t))
	code, _, body := call(t, "GET", st.hook+"/drain?wait=10ms", "")
	require.Equal(t, http.StatusOK, code, body)

	answer := refusedJSON(t, st.base+"/sandboxes", `{"timeout_s": 60}`, true)
	assert.Equal(t, "sandboxd draining: create not started: not accepting new work: "+
		"retry on another node after the Retry-After", answer)
	answer = refusedJSON(t, st.base+"/sandboxes/sb-not-here/resume", "", true)
	assert.Equal(t, "sandboxd draining: resume of sb-not-here not started: not accepting new work: "+
		"retry on another node after the Retry-After", answer)

	rep := st.shutdown(t)
	gd, ok := gaterefusals.Read(rep.Phase(drain.PhaseGate).Detail)
	require.True(t, ok)
	assert.Equal(t, []string{"http create 1", "http resume 1"}, gd.Kinds())
}

// refusedJSON POSTs body to url, checks that the answer is the gate's refusal in JSON
// (503, Retry-After, the connection closed when closes) and returns its error.
func refusedJSON(t *testing.T, url, body string, closes bool) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "5", resp.Header.Get("Retry-After"))
	assert.Equal(t, closes, resp.Close, "Connection: close")
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var answer map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer), "the answer is JSON")
	return answer["error"]
}
