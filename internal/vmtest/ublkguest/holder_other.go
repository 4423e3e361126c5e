//go:build !linux

package ublkguest

// MaybeHolder does nothing outside Linux.
func MaybeHolder() {}
