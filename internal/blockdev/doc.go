// Package blockdev reads what package ublk needs to know about block
// devices: their numbers (sysfs block/NAME/dev), their partitions, and who
// holds them open: processes with the device node open (/proc/PID/fd),
// mounts of a file system on them (/proc/PID/mountinfo, once per mount
// namespace), swap on them (/proc/swaps) and devices stacked on them
// (sysfs holders/). It works for any block device, loop and ublk alike.
//
// Linux only: elsewhere the scans fail with an error wrapping
// errors.ErrUnsupported.
package blockdev
