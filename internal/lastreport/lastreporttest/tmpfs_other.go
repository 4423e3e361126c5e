//go:build !linux

package lastreporttest

import "testing"

// Tmpfs skips the test: a tmpfs of a given size is mounted on Linux alone.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	t.Skip("a tmpfs of its own needs Linux (and root)")
	return ""
}
