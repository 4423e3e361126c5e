package blockdev_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/blockdev"
)

func TestParseDevNum(t *testing.T) {
	d, err := blockdev.ParseDevNum(" 259:12\n")
	require.NoError(t, err)
	assert.Equal(t, blockdev.DevNum{Major: 259, Minor: 12}, d)
	assert.Equal(t, "259:12", d.String())
	for _, bad := range []string{"", "259", "a:1", "1:-2", "1:2:3"} {
		_, err := blockdev.ParseDevNum(bad)
		assert.Error(t, err, bad)
	}
}

// write creates file p under root with content s.
func write(t *testing.T, root, p, s string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, p), []byte(s), 0o644))
}

// A disk's number, its partitions and the devices stacked on the disk or
// on a partition, as sysfs lays them out.
func TestSysfsNumbersPartitionsAndStackedHolders(t *testing.T) {
	sys := t.TempDir()
	write(t, sys, "block/ublkb1/dev", "259:4\n")
	write(t, sys, "block/ublkb1/ublkb1p2/dev", "259:6\n")
	write(t, sys, "block/ublkb1/ublkb1p3/dev", "garbage\n") // not listed: the error says so
	write(t, sys, "block/ublkb1/queue/dev", "1:1\n")        // not a partition
	write(t, sys, "block/ublkb1/holders/dm-0", "")
	write(t, sys, "block/ublkb1/ublkb1p2/holders/md127", "")

	dev, err := blockdev.ReadDevNum(sys, "ublkb1")
	require.NoError(t, err)
	assert.Equal(t, blockdev.DevNum{Major: 259, Minor: 4}, dev)
	_, err = blockdev.ReadDevNum(sys, "ublkb9")
	assert.ErrorIs(t, err, os.ErrNotExist)

	parts, err := blockdev.Partitions(sys, "ublkb1")
	assert.EqualError(t, err, `ublk: partition ublkb1p3 of ublkb1: device number not read: ublk: bad device number "garbage\n"`)
	assert.Equal(t, []blockdev.Partition{{Name: "ublkb1p2", Dev: blockdev.DevNum{Major: 259, Minor: 6}}}, parts)
	if runtime.GOOS != "linux" {
		return
	}
	stacked, err := blockdev.StackHolders(sys, "ublkb1", parts)
	require.NoError(t, err)
	assert.ElementsMatch(t, []blockdev.Holder{
		{Kind: blockdev.Stacked, Detail: "dm-0"},
		{Kind: blockdev.Stacked, Detail: "md127"},
	}, stacked)
}

// A holders/ directory that cannot be listed is named in the error with
// the cause, and the devices the others list are returned: before,
// StackHolders dropped the error, and a caller took the devices stacked
// there for none. One that does not exist (the device gone) is no error.
func TestStackHoldersSaysWhatItCouldNotList(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("sysfs is Linux's")
	}
	sys := t.TempDir()
	write(t, sys, "block/ublkb0/holders", "")                             // a file, ENOTDIR: as EMFILE would fail it
	write(t, sys, "block/ublkb0/ublkb0p1/holders/dm-3", "")               // listed
	parts := []blockdev.Partition{{Name: "ublkb0p1"}, {Name: "ublkb0p2"}} // p2 gone: no holders/
	stacked, err := blockdev.StackHolders(sys, "ublkb0", parts)
	assert.Equal(t, []blockdev.Holder{{Kind: blockdev.Stacked, Detail: "dm-3"}}, stacked)
	assert.Regexp(t, `^ublk: devices stacked on ublkb0 not listed: .*/ublkb0/holders: not a directory$`, err)
}

// A partition whose number cannot be read is named in the error with the
// cause, each one, and does not hide the partitions that can be read: a
// caller still scans those. Before, Partitions left it out without a
// word, and a caller matching holders by number took it for one nothing
// holds. A disk sysfs does not list gives an error wrapping
// fs.ErrNotExist.
func TestPartitionsSaysWhichItCouldNotRead(t *testing.T) {
	sys := t.TempDir()
	write(t, sys, "block/ublkb0/dev", "259:0\n")
	write(t, sys, "block/ublkb0/ublkb0p1/dev", "259:1\n")
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "block/ublkb0/ublkb0p2/dev"), 0o755)) // EISDIR, as EMFILE would fail it
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "block/ublkb0/ublkb0p3"), 0o755))     // no dev file
	write(t, sys, "block/ublkb0/ublkb0p4/dev", "259:4\n")

	parts, err := blockdev.Partitions(sys, "ublkb0")
	assert.Equal(t, []blockdev.Partition{
		{Name: "ublkb0p1", Dev: blockdev.DevNum{Major: 259, Minor: 1}},
		{Name: "ublkb0p4", Dev: blockdev.DevNum{Major: 259, Minor: 4}},
	}, parts, "the partitions read are listed")
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrNotExist, "p3's cause is kept")
	assert.Regexp(t, `^ublk: partition ublkb0p2 of ublkb0: device number not read: read .*/ublkb0p2/dev: is a directory\n`+
		`ublk: partition ublkb0p3 of ublkb0: device number not read: open .*/ublkb0p3/dev: no such file or directory$`, err.Error())

	parts, err = blockdev.Partitions(sys, "ublkb9")
	assert.Empty(t, parts)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, "ublk: partitions of ublkb9: ")
}
