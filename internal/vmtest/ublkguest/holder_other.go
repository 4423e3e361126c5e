//go:build !linux

package ublkguest

// MaybeHolder does nothing outside Linux.
func MaybeHolder() {}

// MaybeIdle does nothing outside Linux.
func MaybeIdle() {}
