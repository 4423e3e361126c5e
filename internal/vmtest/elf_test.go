package vmtest

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary itself: under -race it is linked against libc, which
// the guest must then be given, interpreter first.
func TestSharedLibsOfThisBinaryAreFound(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	libs, err := sharedLibs(exe)
	require.NoError(t, err)
	f, err := elf.Open(exe)
	require.NoError(t, err)
	defer f.Close()
	needed, err := f.ImportedLibraries()
	require.NoError(t, err)
	if len(needed) == 0 {
		assert.Empty(t, libs, "a static binary needs nothing")
		return
	}
	require.Len(t, libs, len(needed)+1, "interpreter plus every DT_NEEDED library")
	for _, l := range libs {
		assert.FileExists(t, l)
	}
	for i, n := range needed {
		assert.Equal(t, n, filepath.Base(libs[i+1]))
	}
	entries, err := libEntries(exe)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.name)
	}
	assert.Contains(t, names, "/lib64/"+needed[0], "every library is also in /lib64")
}
