//go:build linux

package ublkserver

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On a machine without the ublk driver (the CI host), Start says so.
func TestStartWithoutDriverSaysWhatIsMissing(t *testing.T) {
	if _, err := os.Stat(ControlPath); err == nil {
		t.Skip("this machine has the ublk driver; the guest tests cover Start")
	}
	_, err := Start(context.Background(), Config{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ublk_drv")
}
