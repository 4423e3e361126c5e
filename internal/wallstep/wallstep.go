package wallstep

import (
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// Stepped returns at as it was read while the wall clock was off by d
// from what it reads now: the same monotonic reading, a wall clock
// reading d later. at must carry a monotonic reading (time.Now's) and d
// be whole seconds; otherwise, or when time.Time's layout is no longer
// the one it relies on, it returns an error that says so.
func Stepped(at time.Time, d time.Duration) (time.Time, error) {
	if at == at.Round(0) || d%time.Second != 0 {
		return time.Time{}, errors.New("wallstep: at must be on the monotonic clock, d whole seconds")
	}
	type layout struct { // time.Time's fields
		wall uint64 // with a monotonic reading: seconds since 1885 in bits 30..62
		ext  int64  // the monotonic reading
		loc  *time.Location
	}
	out := at
	p := (*layout)(unsafe.Pointer(&out))
	p.wall += uint64(int64(d/time.Second)) << 30
	if out.Sub(at) != 0 || out.Round(0).Sub(at.Round(0)) != d {
		return time.Time{}, fmt.Errorf("wallstep: Stepped no longer matches time.Time's layout: %v from %v", out, at)
	}
	return out, nil
}
