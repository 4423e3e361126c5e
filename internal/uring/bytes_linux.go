//go:build linux

package uring

import "encoding/binary"

// The io_uring ABI is in host byte order.

func put16(b []byte, v uint16) { binary.NativeEndian.PutUint16(b, v) }
func put32(b []byte, v uint32) { binary.NativeEndian.PutUint32(b, v) }
func put64(b []byte, v uint64) { binary.NativeEndian.PutUint64(b, v) }
func get32(b []byte) uint32    { return binary.NativeEndian.Uint32(b) }
func get64(b []byte) uint64    { return binary.NativeEndian.Uint64(b) }
