//go:build !linux

package ublkctl

import (
	"context"
	"errors"
	"fmt"
)

var errUnsupported = fmt.Errorf("ublk: not supported on this system: %w", errors.ErrUnsupported)

// Control is a Controller over /dev/ublk-control; it exists only on Linux.
type Control struct{}

// Open fails: ublk exists only on Linux.
func Open(path string) (*Control, error) {
	return nil, fmt.Errorf("%w: %s: %w", ErrNoControl, path, errUnsupported)
}

// UsePlainNumbers does nothing on this system.
func (c *Control) UsePlainNumbers() {}

// KernelAge is not supported on this system.
func (c *Control) KernelAge(context.Context) (string, error) { return "", errUnsupported }

// DevInfo is not supported on this system.
func (c *Control) DevInfo(context.Context, int) (DevInfo, error) { return DevInfo{}, errUnsupported }

// StopDev is not supported on this system.
func (c *Control) StopDev(context.Context, int) error { return errUnsupported }

// DelDev is not supported on this system.
func (c *Control) DelDev(context.Context, int) error { return errUnsupported }

// Close does nothing on this system.
func (c *Control) Close() error { return nil }
