//go:build !unix

package durable

import "os"

// holdTemp holds nothing where flock(2) does not exist.
func holdTemp(*os.File) (release func(), err error) { return func() {}, nil }

// removeIfGone removes nothing where flock(2) does not exist: no write in progress
// can be told from one cut short.
func removeIfGone(string) (bool, error) { return false, nil }
