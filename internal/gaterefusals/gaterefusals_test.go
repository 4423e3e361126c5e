package gaterefusals

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Read gives the account drain made, and the same account from the Report's
// JSON (its file), every field of it.
func TestReadGivesTheSameAccountFromTheReportAndItsFile(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 19, 0, 0, 0, time.UTC)
	made := &Detail{Refused: 3, By: map[string]map[string]int{"enter": {"create": 2, "fork": 1}},
		First: t0, FirstPhase: "preserve", Last: t0.Add(2 * time.Second), LastPhase: "late"}
	d, ok := Read(made)
	require.True(t, ok)
	assert.Same(t, made, d)

	b, err := json.Marshal(made)
	require.NoError(t, err)
	var file any
	require.NoError(t, json.Unmarshal(b, &file))
	d, ok = Read(file)
	require.True(t, ok)
	assert.Equal(t, made, d)
	assert.Equal(t, []string{"enter create 2", "enter fork 1"}, d.Kinds())
}

// A detail that is no account of refusals is not read as one: nil, a nil
// *Detail, and a field of another type.
func TestReadRefusesWhatIsNoAccount(t *testing.T) {
	for _, detail := range []any{nil, (*Detail)(nil), map[string]any{"refused": "three"}, "refused 3"} {
		_, ok := Read(detail)
		assert.False(t, ok, "%#v", detail)
	}
	d, ok := Read(map[string]any{"refused": 0})
	require.True(t, ok)
	assert.Zero(t, d.Refused)
	assert.Empty(t, d.Kinds())
}

// Kinds are in the order of way, then class, whatever order the maps give.
func TestKindsAreSortedByWayThenClass(t *testing.T) {
	d := &Detail{By: map[string]map[string]int{"http": {"stream": 1, "create": 3}, "enter": {"fork": 2}, "grpc": {"create": 1}}}
	for range 20 {
		assert.Equal(t, []string{"enter fork 2", "grpc create 1", "http create 3", "http stream 1"}, d.Kinds())
	}
}

// A refusal no phase ran at (a gate the server closed itself before the
// drain) is named "before the drain", in the log line's words and in
// termmsg's, and so read back from the Report's file, where its phase is
// left out; a phase is named as it is.
func TestARefusalInNoPhaseIsBeforeTheDrain(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 19, 0, 0, 0, time.UTC)
	b, err := json.Marshal(&Detail{Refused: 2, By: map[string]map[string]int{"enter": {"create": 2}},
		First: t0, Last: t0.Add(time.Second), LastPhase: "preserve"})
	require.NoError(t, err)
	assert.NotContains(t, string(b), "first_phase")
	var file any
	require.NoError(t, json.Unmarshal(b, &file))
	d, ok := Read(file)
	require.True(t, ok)
	assert.Equal(t, "before the drain", PhaseName(d.FirstPhase))
	assert.Equal(t, "before the drain", During(d.FirstPhase))
	assert.Equal(t, "preserve", PhaseName(d.LastPhase))
	assert.Equal(t, "during preserve", During(d.LastPhase))
}
