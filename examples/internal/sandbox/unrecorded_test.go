//go:build linux

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/pause"
)

// Fault: a client's pause before the drain whose record could not be written (a full
// disk, the records directory gone) and whose undo failed left the sandbox listed paused
// with no record (ErrUnrecorded): lost at exit. The drain lists only running sandboxes,
// so its Report had no entry for it, counted nothing lost and the server exited 0 while
// the sandbox, listed "paused" to every client, was gone at the restart. The node knew.
// A drain now lists such a sandbox and writes its record (its image was written durably
// by the pause, only the record failed): preserved when the disk has room again, counted
// lost when it has not.
func TestSandboxPausedUnrecordedBeforeTheDrainIsTheDrains(t *testing.T) {
	for _, fixed := range []bool{true, false} {
		name := map[bool]string{true: "records directory back", false: "records directory still gone"}[fixed]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				records := filepath.Join(dir, "records")
				st, err := store.Open(records)
				require.NoError(t, err)
				rt := unresumable{&Fake{Dir: filepath.Join(dir, "images"), PauseLatency: time.Second}}
				n, _, err := NewNode(rt, st, nil)
				require.NoError(t, err)
				defer n.Close()
				a, err := n.Create(t.Context(), 3600)
				require.NoError(t, err)

				require.NoError(t, os.RemoveAll(records))
				_, err = n.Pause(t.Context(), a.ID) // a client's, before the drain
				require.ErrorIs(t, err, ErrUnrecorded)
				require.Equal(t, []Info{{ID: a.ID, State: Paused, TimeoutS: 3600}}, n.List(), "listed paused, with no record")
				if fixed {
					require.NoError(t, os.MkdirAll(records, 0o700))
				}

				p, err := pause.New(pause.ListFunc(n.Running), pause.Config{})
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				rep := p.Run(ctx, time.Time{})
				require.Len(t, rep.Entries, 1, "the drain accounts for the sandbox it would lose")
				e := rep.Entries[0]
				assert.Equal(t, a.ID, e.ID)
				if !fixed {
					assert.True(t, e.Outcome.Lost(), "%s: %s", e.Outcome, e.Error)
					assert.Equal(t, 1, rep.Lost())
					return
				}
				assert.Equal(t, pause.Preserved, e.Outcome, e.Error)
				assert.Zero(t, rep.Lost())

				recs, problems, err := st.Load()
				require.NoError(t, err)
				assert.Empty(t, problems)
				require.Len(t, recs, 1, "recorded: the next server brings it back")
				assert.Equal(t, a.ID, recs[0].ID)
				again, err := n.Running(t.Context())
				require.NoError(t, err)
				assert.Empty(t, again, "recorded, it is no drain's any more")
			})
		})
	}
}

// Fault: a client whose pause got ErrUnrecorded (a 500 from sandboxd, which a client
// retries) was told 409 "is paused, not running" by its retry, once the disk had room
// again: it took the sandbox for paused, and a process that then ended without a drain
// (a crash, an OOM kill) lost it. A pause of a sandbox paused with no record now writes
// the record.
func TestPauseAgainOfASandboxPausedUnrecordedRecordsIt(t *testing.T) {
	dir := t.TempDir()
	records := filepath.Join(dir, "records")
	st, err := store.Open(records)
	require.NoError(t, err)
	rt := unresumable{&Fake{Dir: filepath.Join(dir, "images"), PauseLatency: time.Millisecond}}
	n, _, err := NewNode(rt, st, nil)
	require.NoError(t, err)
	defer n.Close()
	a, err := n.Create(t.Context(), 3600)
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(records))
	_, err = n.Pause(t.Context(), a.ID)
	require.ErrorIs(t, err, ErrUnrecorded)

	require.NoError(t, os.MkdirAll(records, 0o700))
	info, err := n.Pause(t.Context(), a.ID) // the client's retry
	require.NoError(t, err)
	assert.Equal(t, Paused, info.State)
	recs, _, err := st.Load()
	require.NoError(t, err)
	require.Len(t, recs, 1, "recorded: a restart brings it back")
	assert.Equal(t, a.ID, recs[0].ID)

	_, err = n.Pause(t.Context(), a.ID)
	assert.ErrorIs(t, err, ErrConflict, "recorded, it is paused as any other")
}
