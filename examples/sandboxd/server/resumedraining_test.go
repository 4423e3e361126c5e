package server

import (
	"encoding/json"
	"net/http"
	"testing"

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
