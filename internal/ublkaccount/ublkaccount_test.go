package ublkaccount

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/gaterefusals"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// The other Details a drain's steps carry, made or read from a file, are
// not read as a ublk teardown's.
func TestReadTakesOnlyAUblkReport(t *testing.T) {
	for _, made := range []any{&pause.Report{Counts: map[pause.Outcome]int{}}, &gaterefusals.Detail{Refused: 2},
		map[string]any{"verdict": "ok"}, (*ublk.Report)(nil)} {
		_, ok := Read(made)
		assert.False(t, ok, "%T", made)
		b, err := json.Marshal(made)
		require.NoError(t, err)
		var file any
		require.NoError(t, json.Unmarshal(b, &file))
		_, ok = Read(file)
		assert.False(t, ok, "%T from its file", made)
	}
	a, ok := Read(&ublk.Report{Verdict: ublk.VerdictStopped, KernelClass: ublk.KernelClass("fixed"),
		Devices: []ublk.DeviceReport{{ID: 3, Verdict: ublk.VerdictStopped}}})
	require.True(t, ok)
	assert.Equal(t, []Device{{ID: 3, Verdict: ublk.VerdictStopped}}, a.Devices)
	assert.Equal(t, "ublk teardown (step daemon): stopped, 1 device", a.Line("daemon"))
}
