package ublk

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkctl"
)

func TestScanDevicesReadsTheKernelsLayout(t *testing.T) {
	tree, err := fakeublk.NewTree(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: 10, Major: 259, Minor: 4, Reads: 7, Writes: 2}))
	require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: 2, Major: 259, Minor: 1}))
	require.NoError(t, tree.StopDevice(2)) // dead: char only
	for _, junk := range []string{"block/loop0", "block/ublkb", "block/ublkb01", "class/ublk-char/ublkcx"} {
		require.NoError(t, os.MkdirAll(filepath.Join(tree.Root, junk), 0o755))
	}

	devs, err := scanDevices(sysfs{root: tree.Root})
	require.NoError(t, err)
	assert.Equal(t, []Device{
		{ID: 2, Char: true},
		{ID: 10, Char: true, Disk: true, Dev: "259:4", Inflight: Inflight{7, 2}},
	}, devs)
	assert.Equal(t, "dead", devs[0].State())
	assert.Equal(t, "live", devs[1].State())
	assert.Equal(t, "ublkb10", devs[1].DiskName())
	assert.Equal(t, "ublkc10", devs[1].CharName())

	gone, err := readDevice(sysfs{root: tree.Root}, 99)
	require.NoError(t, err)
	assert.Equal(t, "gone", gone.State())
}

func TestScanDevicesWithoutUblkModule(t *testing.T) {
	devs, err := scanDevices(sysfs{root: t.TempDir()})
	require.NoError(t, err)
	assert.Empty(t, devs)
}

func TestReportMarshalsToJSON(t *testing.T) {
	info := driverInfo(ublkctl.DevInfo{State: ublkctl.StateLive, DevID: 1, ServerPID: 42, Flags: ublkctl.FlagUserRecovery})
	rep := Report{Kernel: "6.8.0-45-generic", KernelClass: KernelVulnerable, Verdict: VerdictLeftLive,
		Devices: []DeviceReport{{ID: 1, Info: info, Verdict: VerdictLeftLive,
			Holders: []Holder{{PID: 9, Comm: "firecracker", Kind: "fd", Detail: "fd 5 -> /dev/ublkb1"}}}}}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, "vulnerable", back["kernel_class"])
	dev := back["devices"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"state": "live", "ublksrv_pid": 42.0, "flags": 8.0, "nr_hw_queues": 0.0, "queue_depth": 0.0}, dev["info"])
	assert.Equal(t, "firecracker", dev["holders"].([]any)[0].(map[string]any)["comm"])
	assert.NotContains(t, back, "deadline", "zero deadline omitted")
}
