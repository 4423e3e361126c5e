package ublkserver

import (
	"fmt"
	"log/slog"
	"time"
)

// Config sizes a Server. The zero value is one device of 32 MiB with one
// queue of depth 32 and requests of up to 128 KiB.
type Config struct {
	Devices    int           // devices to create; 1 when zero
	Size       int64         // bytes per device, a multiple of 4096; 32 MiB when zero
	Queues     int           // hardware queues per device; 1 when zero (the kernel caps it at the CPU count)
	Depth      int           // requests in flight per queue; 32 when zero, at most 4096
	MaxIOBytes int           // largest request in bytes; 128 KiB when zero
	IODelay    time.Duration // added before answering each request, to keep I/O in flight longer
	// BackingDir, when set, keeps each device's disk in the file
	// BackingDir/ublk<N>.img (shared-mapped, so it outlives the server,
	// even a killed one) instead of anonymous memory; tests read it after a
	// teardown to check that every acknowledged write arrived.
	BackingDir string
	// EventLog, when set, is a file the server appends its control
	// actions to, one "<unix nanoseconds> <event> <device id>" line each
	// (see ReadEvents); tests order them against what they observed.
	EventLog string
	// Unprivileged adds the devices with UBLK_F_UNPRIVILEGED_DEV, as a
	// server run by a user does (its udev rule gives the user ublkcN and
	// ublkbN): the driver then takes a control command for such a device,
	// from root too, only when it names the device's /dev/ublkcN, which
	// every command after ADD_DEV does.
	Unprivileged bool
	// Recovery adds the devices with UBLK_F_USER_RECOVERY: a device
	// whose server dies is quiesced (its I/O held) for the next server to
	// recover, not stopped.
	Recovery bool
	Logger   *slog.Logger // queue errors; discarded when nil
}

func (c Config) withDefaults() (Config, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Devices, 1)
	def(&c.Queues, 1)
	def(&c.Depth, 32)
	def(&c.MaxIOBytes, 128<<10)
	if c.Size == 0 {
		c.Size = 32 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Devices < 0:
		return c, fmt.Errorf("ublkserver: Config.Devices %d is negative", c.Devices)
	case c.Size < 0 || c.Size%4096 != 0:
		return c, fmt.Errorf("ublkserver: Config.Size %d is not a positive multiple of 4096", c.Size)
	case c.Queues < 0 || c.Queues > 4096:
		return c, fmt.Errorf("ublkserver: Config.Queues %d is out of range 1..4096", c.Queues)
	case c.Depth < 0 || c.Depth > maxQueueDepth:
		return c, fmt.Errorf("ublkserver: Config.Depth %d is out of range 1..%d", c.Depth, maxQueueDepth)
	case c.MaxIOBytes < 4096 || c.MaxIOBytes%4096 != 0:
		return c, fmt.Errorf("ublkserver: Config.MaxIOBytes %d is not a multiple of 4096", c.MaxIOBytes)
	case c.IODelay < 0:
		return c, fmt.Errorf("ublkserver: Config.IODelay %v is negative", c.IODelay)
	}
	return c, nil
}
