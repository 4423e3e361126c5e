//go:build !linux

package ublkserver

// MaybeDaemon does nothing outside Linux: ublk is a Linux driver.
func MaybeDaemon() {}
