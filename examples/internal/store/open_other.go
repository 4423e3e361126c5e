//go:build !unix

package store

// openFlags: no FIFOs or non-blocking opens to guard against here.
const openFlags = 0
