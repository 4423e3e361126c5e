package drain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ConfigFromEnv reads the manifest's variables as NewServer does, for a
// server that calls New itself (a review: a gRPC server copying the
// README's manifest had every DRAINKIT_* variable silently ignored), and
// its errors name the variable.
func TestConfigFromEnvReadsWhatNewServerReads(t *testing.T) {
	t.Setenv(EnvPodName, "")
	t.Setenv(EnvGrace, "90")
	t.Setenv(EnvPreserveEstimate, "3s")
	t.Setenv(EnvSandboxTimeout, "20s")
	cfg, err := ConfigFromEnv()
	require.NoError(t, err)
	assert.Equal(t, 90*time.Second, cfg.Budget.Grace())
	assert.Equal(t, 3*time.Second, cfg.Pause.Estimator.Estimate())
	assert.Equal(t, 20*time.Second, cfg.Pause.SandboxTimeout)
	assert.Nil(t, cfg.Pod, "no POD_NAME: no pod")
	assert.NotNil(t, cfg.Logger)

	for name, val := range map[string]string{EnvGrace: "ninety", EnvPreserveEstimate: "-3s", EnvSandboxTimeout: "soon"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, val)
			_, err := ConfigFromEnv()
			require.Error(t, err)
			assert.Contains(t, err.Error(), name+"=")
		})
	}
	t.Run("margin", func(t *testing.T) {
		assert.Equal(t, 5*time.Second, cfg.Budget.Margin(), "unset: a tenth of 90 s, at most 5 s")
		t.Setenv(EnvMargin, "12s")
		cfg, err := ConfigFromEnv()
		require.NoError(t, err)
		assert.Equal(t, 12*time.Second, cfg.Budget.Margin())
		t.Setenv(EnvMargin, "90")
		_, err = ConfigFromEnv()
		assert.ErrorContains(t, err, EnvMargin+`="90" with `+EnvGrace+`="1m30s"`, "not shorter than the grace")
		t.Setenv(EnvMargin, "late")
		_, err = ConfigFromEnv()
		assert.ErrorContains(t, err, EnvMargin+`="late"`)
	})
	t.Run("unset grace", func(t *testing.T) {
		t.Setenv(EnvGrace, "")
		_, err := ConfigFromEnv()
		assert.ErrorContains(t, err, EnvGrace+" is not set")
	})
}
