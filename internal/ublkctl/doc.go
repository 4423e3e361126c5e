// Package ublkctl is a client of /dev/ublk-control, the ublk driver's
// control device: GET_DEV_INFO, STOP_DEV and DEL_DEV sent as io_uring
// URING_CMDs on an SQE128 ring, in pure Go. Package ublk uses it as the
// teardown step's fallback when the daemon does not stop its devices.
//
// The commands go with the ioctl-encoded numbers (Linux 6.4 on) and, once
// the kernel refused one as an unknown command, with the plain numbers,
// the only ones 6.0-6.3 take (see Control).
//
// It never opens /dev/ublkcN (on 6.15+ closing it runs the device's
// release path). On systems other than Linux, Open fails with an error
// wrapping ErrNoControl.
package ublkctl
