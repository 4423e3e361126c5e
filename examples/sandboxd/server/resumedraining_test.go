package server

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/gaterefusals"
	"github.com/drainkit/drainkit/pause"
)

// Fault (the gate review, as row 1552 for the gVisor worker's Restore): sandboxd refused
// a resume while it drained with the gate's answer for new work, 503 "node is draining,
// not accepting new work (resume)" on a connection it closed, so that the retry went to
// a node still ready; but a sandbox paused here has its record and image in this node's
// state directory (a hostPath), which no other node has, and a client that did as told
// found no such sandbox there (404), as if it were gone, where it was to be resumed here
// once sandboxd served again. On loopback:
//
//	a sandbox created and paused; the preStop call closes the gate
//	resume of it:       before, the gate's words and Connection: close
//	                    now, 503 with Retry-After, its ID and "resume it here", the
//	                    connection kept
//	resume of another:  the gate's answer, as before
//	the Report:         both counted refused, http resume 2
func TestResumeRefusedWhileDrainingSaysTheSandboxIsHere(t *testing.T) {
	st := start(t, testConfig(t))
	id := createSandbox(t, st.base)
	code, _, body := call(t, "POST", st.base+"/sandboxes/"+id+"/pause", "")
	require.Equal(t, http.StatusOK, code, body)
	code, _, body = call(t, "GET", st.hook+"/drain?wait=10ms", "")
	require.Equal(t, http.StatusOK, code, body)

	resp, err := http.Post(st.base+"/sandboxes/"+id+"/resume", "application/json", nil)
	require.NoError(t, err)
	var answer map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "5", resp.Header.Get("Retry-After"))
	assert.False(t, resp.Close, "the connection is kept: a new one goes to another node, which has no such sandbox")
	assert.Equal(t, "sandboxd draining: resume of "+id+" not started: its record and image are in this node's state directory, "+
		"which no other node has: resume it here once sandboxd serves again", answer["error"])

	resp, err = http.Post(st.base+"/sandboxes/sb-not-here/resume", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.True(t, resp.Close, "the gate's answer for what is not here")

	rep := st.shutdown(t)
	gd, ok := gaterefusals.Read(rep.Phase(drain.PhaseGate).Detail)
	require.True(t, ok)
	assert.Equal(t, []string{"http resume 2"}, gd.Kinds())
}

// Fault (the gate review, after row 2244): a resume refused while sandboxd drained of
// a sandbox running here got the gate's answer for new work, text saying "not
// accepting new work (resume)" on a connection it closed, so that the retry went to a
// node still ready; but the drain pauses that sandbox here, its record and image in
// this node's state directory, which no other node has, and there the retry found no
// such sandbox (404), as row 2244's paused one did. Row 2244 covered paused ones only.
// On loopback:
//
//	a sandbox created, running; the preStop call closes the gate
//	resume of it:  before, the gate's words and Connection: close
//	               now, 503 JSON with Retry-After, its ID, "the drain pauses it here"
//	               and "resume it here", the connection kept
//	the drain:     pauses it here; the Report counts the resume refused
func TestResumeOfARunningSandboxRefusedWhileDrainingSaysToResumeItHere(t *testing.T) {
	st := start(t, testConfig(t))
	id := createSandbox(t, st.base)
	code, _, body := call(t, "GET", st.hook+"/drain?wait=10ms", "")
	require.Equal(t, http.StatusOK, code, body)

	answer := refusedJSON(t, st.base+"/sandboxes/"+id+"/resume", "", false)
	assert.Equal(t, "sandboxd draining: resume of "+id+" not started: it is running here, and the drain pauses it here: "+
		"its record and image will be in this node's state directory, which no other node has: resume it here once sandboxd serves again", answer)

	rep := st.shutdown(t)
	gd, ok := gaterefusals.Read(rep.Phase(drain.PhaseGate).Detail)
	require.True(t, ok)
	assert.Equal(t, []string{"http resume 1"}, gd.Kinds())
	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1)
	assert.Equal(t, id, rep.Preserve.Entries[0].ID)
	assert.Equal(t, pause.Preserved, rep.Preserve.Entries[0].Outcome, "paused here by the drain")
}

// Fault (the gate review, after rows 2244 and 2302): a resume refused while sandboxd
// drained of a sandbox in transition here (being paused, resumed or created by a
// request in flight) got the gate's answer for new work, "retry on another node", on a
// connection it closed; but the drain waits for that request and leaves the sandbox
// paused here, its record and image in this node's state directory, which no other node
// has, and there the retry found no such sandbox (404), as rows 2244 and 2302 found for
// one paused or running. On loopback, pauses taking 2 s:
//
//	a sandbox created; its pause in flight, the sandbox pausing
//	the preStop call closes the gate
//	resume of it:  before, "retry on another node" and Connection: close
//	               now, 503 JSON with Retry-After, its ID, "being paused here" and
//	               "resume it here", the connection kept
//	the pause:     answers 200; the sandbox stays here, paused
//	the Report:    counts the resume refused, http resume 1
func TestResumeOfASandboxInTransitionRefusedWhileDrainingSaysToResumeItHere(t *testing.T) {
	cfg := testConfig(t)
	cfg.PauseLatency = 2 * time.Second
	st := start(t, cfg)
	id := createSandbox(t, st.base)
	paused := make(chan int, 1)
	go func() {
		resp, err := http.Post(st.base+"/sandboxes/"+id+"/pause", "application/json", nil)
		if assert.NoError(t, err) {
			resp.Body.Close()
			paused <- resp.StatusCode
		}
		close(paused)
	}()
	require.Eventually(t, func() bool { return stateOf(t, st.base, id) == "pausing" }, 10*time.Second, 5*time.Millisecond,
		"the pause in flight")
	code, _, body := call(t, "GET", st.hook+"/drain?wait=10ms", "")
	require.Equal(t, http.StatusOK, code, body)

	answer := refusedJSON(t, st.base+"/sandboxes/"+id+"/resume", "", false)
	assert.Equal(t, "sandboxd draining: resume of "+id+" not started: it is being paused here, and the drain leaves it paused here: "+
		"its record and image will be in this node's state directory, which no other node has: resume it here once sandboxd serves again", answer)
	assert.Equal(t, http.StatusOK, <-paused, "the pause in flight ends as it would have")
	assert.Equal(t, "paused", stateOf(t, st.base, id), "kept here, paused, for its resume here")

	rep := st.shutdown(t)
	gd, ok := gaterefusals.Read(rep.Phase(drain.PhaseGate).Detail)
	require.True(t, ok)
	assert.Equal(t, []string{"http resume 1"}, gd.Kinds())
}

// stateOf is the state GET /sandboxes shows for sandbox id, or "" when it lists none.
func stateOf(t *testing.T, base, id string) string {
	t.Helper()
	code, _, body := call(t, "GET", base+"/sandboxes", "")
	require.Equal(t, http.StatusOK, code, body)
	var list []sandboxView
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	for _, v := range list {
		if v.ID == id {
			return v.State
		}
	}
	return ""
}
