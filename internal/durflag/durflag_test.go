package durflag_test

import (
	"bytes"
	"flag"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/durflag"
)

func TestParseGrace(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"30": 30 * time.Second, "3600": time.Hour, "30s": 30 * time.Second, "1m30s": 90 * time.Second,
		"100ms": 100 * time.Millisecond, "9223372036": 9223372036 * time.Second,
	} {
		got, err := durflag.ParseGrace(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, got, v)
	}
	for v, msg := range map[string]string{
		"0": "must be positive", "-5": "must be positive", "0s": "must be positive", "-1s": "must be positive",
		"9223372037": "want at most 9223372036 seconds", "99999999999999999999": "want at most",
		"soon": "want whole seconds (30) or a duration", "": "want whole seconds", "30 s": "want whole seconds",
	} {
		_, err := durflag.ParseGrace(v)
		require.Error(t, err, v)
		assert.Contains(t, err.Error(), msg, v)
		assert.Contains(t, err.Error(), `"`+v+`"`, "the error quotes what was given")
	}
	assert.Equal(t, int64(math.MaxInt64/time.Second), int64(9223372036))
}

// The value is the flag package's: Parse names the flag, PrintDefaults
// shows the placeholder and a default only when there is one, and Get
// gives the Duration.
func TestGraceVarInAFlagSet(t *testing.T) {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	var grace, kubelet, plan time.Duration
	durflag.GraceVar(fs, &grace, "grace", 30*time.Second, "the pod's grace")
	durflag.GraceVar(fs, &kubelet, "kubelet-grace", 0, "the kubelet's own grace")
	durflag.GraceVar(fs, &plan, "plan-grace", 0, "a grace in `SECONDS`")
	fs.PrintDefaults()
	usage := out.String()
	assert.Contains(t, usage, "-grace seconds\n")
	assert.Contains(t, usage, "the pod's grace, in seconds or as a duration (30s) (default 30s)")
	assert.Contains(t, usage, "the kubelet's own grace, in seconds or as a duration (30s)\n", "zero: not given, no default shown")
	assert.Contains(t, usage, "-plan-grace SECONDS\n", "a usage's own placeholder is kept")

	require.NoError(t, fs.Parse([]string{"-grace", "3600", "-kubelet-grace", "25s"}))
	assert.Equal(t, time.Hour, grace)
	assert.Equal(t, 25*time.Second, kubelet)
	assert.Equal(t, time.Hour, fs.Lookup("grace").Value.(flag.Getter).Get())
	assert.Equal(t, "1h0m0s", fs.Lookup("grace").Value.String())

	err := fs.Parse([]string{"-grace", "abc"})
	require.Error(t, err)
	assert.Equal(t, `invalid value "abc" for flag -grace: want whole seconds (30) or a duration (30s, 1m30s), got "abc"`, err.Error())
	assert.Equal(t, time.Hour, grace, "a refused value leaves the last one")
}

// DurationVar takes what flag.FlagSet.DurationVar takes, the same way, and
// its errors say what is wanted.
func TestDurationVarInAFlagSet(t *testing.T) {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	var pause, step time.Duration
	durflag.DurationVar(fs, &pause, "pause", time.Second, "time one pause takes")
	durflag.DurationVar(fs, &step, "step", 0, "pause per step")
	fs.PrintDefaults()
	assert.Contains(t, out.String(), "-pause duration\n")
	assert.Contains(t, out.String(), "time one pause takes, a duration (default 1s)")
	assert.Contains(t, out.String(), "pause per step, a duration\n", "zero: no default shown, as flag.Duration")

	require.NoError(t, fs.Parse([]string{"-pause", "-2s", "-step", "0"}))
	assert.Equal(t, -2*time.Second, pause, "as flag.Duration: the program decides what a negative one means")
	assert.Equal(t, time.Duration(0), step, "0 needs no unit")
	assert.Equal(t, -2*time.Second, fs.Lookup("pause").Value.(flag.Getter).Get())

	for v, want := range map[string]string{
		"1.5":  `invalid value "1.5" for flag -pause: want a duration with its unit (1.5ms, 1.5s, 1.5m), got "1.5"`,
		"soon": `invalid value "soon" for flag -pause: want a duration such as 500ms, 30s or 1m30s, got "soon"`,
	} {
		err := fs.Parse([]string{"-pause", v})
		require.Error(t, err, v)
		assert.Equal(t, want, err.Error())
	}
}
