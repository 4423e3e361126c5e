package httpsource

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/listedstate"
	"github.com/drainkit/drainkit/pause"
)

// A listing of every sandbox (NoStateField) still tells each one's state,
// through listedstate.Of, sized or not; an element without a state that is a
// string or number, and a sandbox no listing gave, have none. A real server on
// loopback.
func TestListedStateIsTheElementsStateWithNoStateFieldToo(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`[{"id":"a","state":"running","mb":64},{"id":"b","state":"Paused"},{"id":"c"},{"id":"d","state":null}]`))
	}))
	defer ts.Close()
	for _, c := range []Config{{NoStateField: true, SizeField: "mb"}, {NoStateField: true}} {
		src, err := New(ts.URL, c)
		require.NoError(t, err)
		sbs, err := src.List(t.Context())
		require.NoError(t, err)
		got := map[string]any{}
		for _, sb := range sbs {
			if state, ok := listedstate.Of(sb); ok {
				got[sb.ID()] = state
			} else {
				got[sb.ID()] = false
			}
		}
		assert.Equal(t, map[string]any{"a": "running", "b": "Paused", "c": false, "d": false}, got, "%+v", c)
		_, ok := listedstate.Of(src.Sandbox("a"))
		assert.False(t, ok, "a sandbox no listing gave")
		_, ok = listedstate.Of(pause.Sandbox(nil))
		assert.False(t, ok)
		src.CloseIdleConnections()
	}
}
