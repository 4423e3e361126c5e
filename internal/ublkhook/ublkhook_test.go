package ublkhook_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/ublk"
)

// The hooks reach the teardown: it classifies the pretended release,
// reads the fake sysfs, and opens the supplied Controller.
func TestHooksReachTheTeardown(t *testing.T) {
	tree, err := fakeublk.NewTree(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: 3, Major: 4000, Minor: 3}))
	opened := errors.New("the hook's controller was asked for")
	cfg := ublkhook.With(ublk.Config{}, ublkhook.Hooks{
		SysfsRoot:     tree.Root,
		ProcfsRoot:    t.TempDir(),
		KernelRelease: "6.14.6",
		OpenControl:   func(context.Context) (ublkctl.Controller, error) { return nil, opened },
	})
	td, err := ublk.New(ublk.DaemonFuncs{StopFunc: func(context.Context) error { return errors.New("refused") }}, cfg)
	require.NoError(t, err)
	release, class := td.Kernel()
	assert.Equal(t, "6.14.6", release)
	assert.Equal(t, ublk.KernelExitMayHang, class)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := td.Stop(ctx)
	require.Error(t, err)
	require.Len(t, rep.Devices, 1, "the fake sysfs was read")
	assert.Equal(t, 3, rep.Devices[0].ID)
	assert.ErrorIs(t, err, opened, "the fallback used the hook's controller")
}

// Set panics on anything but a *ublk.Config: a wrong call is a bug.
func TestSetWantsAConfigPointer(t *testing.T) {
	assert.Panics(t, func() { ublkhook.Set(ublk.Config{}, ublkhook.Hooks{}) })
}
