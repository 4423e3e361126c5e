package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/learned"
)

// Fault (the user's first hour): every server makes its state directory
// when it starts (internal/statedir), so a -state-dir that does not exist
// is no node's: a typo, or a path the pod mounts and the node does not
// have. The runbook's command, its flags standing in for the rates of a
// node that never drained, took it for such a node: it said "no
// learned-rates.json yet: the server writes it at its first shutdown",
// planned without the teardown steps the server learned and exited 0,
// FITS, where the node's own rates say DOES NOT FIT. It now names the
// directory that does not exist and exits 2, as for a file it cannot read.
func TestPlanRefusesAStateDirThatDoesNotExist(t *testing.T) {
	node := filepath.Join(t.TempDir(), "var", "lib", "sandboxd")
	require.NoError(t, os.MkdirAll(node, 0o755))
	rates, err := os.ReadFile(filepath.Join("testdata", "state", learned.File)) // ublk 0.5 s, critical; http 0.25 s
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(node, learned.File), rates, 0o644))
	runbook := []string{"plan", "-count", "14", "-grace", "8", "-estimate", "1500ms", "-concurrency", "4"}

	code, out, errw := drainkit(t, append(runbook, "-state-dir", node)...)
	require.Equal(t, exitNoFit, code, errw)
	assert.Contains(t, out, "DOES NOT FIT")

	typo := filepath.Join(filepath.Dir(node), "sandbox")
	code, out, errw = drainkit(t, append(runbook, "-state-dir", typo)...)
	assert.Equal(t, exitUsage, code, out)
	assert.NotContains(t, out, "FITS")
	assert.Contains(t, errw, "-state-dir "+typo+": no such directory")

	code, out, errw = drainkit(t, append(runbook, "-rates", filepath.Join(typo, learned.File))...)
	assert.Equal(t, exitUsage, code, out)
	assert.Contains(t, errw, "-rates "+filepath.Join(typo, learned.File)+": no such directory "+typo)

	// A node that never drained: its server made the directory, empty.
	empty := t.TempDir()
	code, out, errw = drainkit(t, append(runbook, "-state-dir", empty)...)
	assert.Equal(t, exitOK, code, errw)
	assert.Contains(t, out, "yet: the server writes it at its first shutdown")
}
