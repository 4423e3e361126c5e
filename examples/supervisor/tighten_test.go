//go:build linux

package main

import (
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
)

// The daemon step has the ublk teardown's Tighten, which drain calls when
// its budget moves SIGKILL earlier during the step or Force leaves it its
// reserve: the teardown lays its control fallback and kill out again
// before the new deadline (rows 496-498). Made by drain.NewStep alone, it
// had none, and drain only cancelled the teardown there, its late stages
// never run.
func TestDaemonStepHasTheTeardownsTighten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := parseArgs([]string{"-grace", "100s", "-daemon", "ublkd", "--", "server"}, io.Discard)
		require.NoError(t, err)
		sup, err := newSupervisor(cfg, io.Discard)
		require.NoError(t, err)
		var daemon drain.Step
		for _, st := range sup.steps {
			if st.Phase().Name == StepDaemon {
				daemon = st
			}
		}
		require.NotNil(t, daemon)
		tt, ok := daemon.(interface{ Tighten(time.Time) bool })
		require.True(t, ok, "the daemon step has a Tighten method")
		assert.False(t, tt.Tighten(time.Now().Add(time.Second)), "the teardown's: nothing to move with no teardown in progress")
	})
}
