package ublk

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Report's JSON names durations like drain's and pause's (*_ns) and
// carries verdicts as identifiers.
func TestReportJSONUsesNanosecondDurationsAndVerdictIdentifiers(t *testing.T) {
	rep := &Report{Duration: 1500 * time.Millisecond, Verdict: VerdictLeftLive,
		Steps:   []StepResult{{Name: "request stop", Duration: 2 * time.Millisecond}},
		Devices: []DeviceReport{{ID: 0, Verdict: VerdictLeftLive, Steps: []StepResult{{Name: "wait", Duration: time.Second}}}}}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var raw struct {
		Duration *int64 `json:"duration_ns"`
		Verdict  string `json:"verdict"`
		Steps    []map[string]any
		Devices  []struct {
			Verdict string           `json:"verdict"`
			Steps   []map[string]any `json:"steps"`
		}
	}
	require.NoError(t, json.Unmarshal(b, &raw))
	require.NotNil(t, raw.Duration)
	assert.Equal(t, int64(1500*time.Millisecond), *raw.Duration)
	assert.Equal(t, "left_live", raw.Verdict)
	assert.Equal(t, float64(2*time.Millisecond), raw.Steps[0]["duration_ns"])
	assert.NotContains(t, raw.Steps[0], "duration")
	assert.Equal(t, "left_live", raw.Devices[0].Verdict)
	assert.Equal(t, float64(time.Second), raw.Devices[0].Steps[0]["duration_ns"])

	var back Report
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, rep.Duration, back.Duration)
	assert.Equal(t, rep.Steps[0].Duration, back.Steps[0].Duration)
}

func TestVerdictsAreSnakeCaseIdentifiersOrderedBySeverity(t *testing.T) {
	ident := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	verdicts := []Verdict{VerdictNothingToDo, VerdictStopped, VerdictAbsent, VerdictStoppedByControl, VerdictKilled,
		VerdictNotStopped, VerdictOrphaned, VerdictHeld, VerdictLeftLive}
	seen := map[Verdict]bool{}
	for i, v := range verdicts {
		assert.Regexp(t, ident, string(v))
		assert.False(t, seen[v], "%s twice", v)
		seen[v] = true
		assert.Equal(t, i, severity(v), "%s", v)
	}
}
