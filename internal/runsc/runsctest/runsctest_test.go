//go:build linux

package runsctest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The volume is a tmpfs of the size asked for, read-only when asked, at a directory made
// for it, and gone once the test has ended.
func TestImagesVolumeIsATmpfsUntilTheTestEnds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	t.Run("mounted", func(t *testing.T) {
		ImagesVolume(t, dir, syscall.MS_RDONLY, "size=4k", "a read-only images volume")
		var st syscall.Statfs_t
		require.NoError(t, syscall.Statfs(dir, &st))
		assert.Equal(t, int64(0x01021994), int64(st.Type), "not a tmpfs") // TMPFS_MAGIC
		assert.Equal(t, uint64(4096), st.Blocks*uint64(st.Bsize))
		assert.ErrorIs(t, os.WriteFile(filepath.Join(dir, "f"), nil, 0o600), syscall.EROFS)
	})
	assert.NoError(t, os.WriteFile(filepath.Join(dir, "f"), nil, 0o600), "the read-only volume is still mounted once its test ended")
}
