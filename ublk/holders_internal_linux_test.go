//go:build linux

package ublk

import (
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A process whose io_uring's registered files the kernel does not list (the
// ring was busy at every read: "UserFiles: 2" and no slot lines) may hold
// a disk: the step goes on as it does for mappings it cannot read, and the
// holders step's error in the Report names the process.
func TestHoldersStepNamesAProcessWhoseRingIsNotListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		require.NoError(t, os.MkdirAll(filepath.Join(f.proc, "42", "fd"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(f.proc, "42", "comm"), []byte("spdk\n"), 0o644))
		require.NoError(t, os.Symlink("anon_inode:[io_uring]", filepath.Join(f.proc, "42", "fd", "9")))
		require.NoError(t, os.MkdirAll(filepath.Join(f.proc, "42", "fdinfo"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(f.proc, "42", "fdinfo", "9"),
			[]byte("SqThread:\t-1\nUserFiles:\t2\nUserBufs:\t0\nPollList:\n"), 0o644))
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{}))
		require.NoError(t, err)

		rep, _, err := runFor(t, td, 3600*time.Second)
		require.NoError(t, err)
		h := rep.Step("holders")
		require.NotNil(t, h)
		assert.Equal(t, "no holders", h.Result)
		assert.Contains(t, h.Err, "42 (spdk)")
		assert.Contains(t, h.Err, "io_uring registered files")
	})
}
