package pause

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// A run is allocated once per Run, in the 1,024-byte size class: past
// 1,016 bytes (the allocation's 8-byte header) it takes the next, 1,152,
// and a Run of 10 no-ops 128 B more (docs/preserve.md). Its contexts are
// held in it (follow.Context), not allocated.
func TestRunStaysInItsSizeClass(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sized for 64-bit words")
	}
	if n := unsafe.Sizeof(run{}); n > 1016 {
		t.Errorf("a run is %d bytes, past 1,016: the next size class", n)
	}
}

type sizeNoop string

func (n sizeNoop) ID() string                       { return string(n) }
func (sizeNoop) Preserve(ctx context.Context) error { return nil }

// A Run of 10 no-ops makes 33 allocations without deadlines, 52 with both
// (docs/preserve.md): the contexts that follow Tighten cost none. Without
// deadlines it made 25 until row 1883, which makes each listing's call
// beside the Run's goroutine, as with deadlines (its channel and the
// call's goroutine, four a listing), so that a Tighten bounds it.
func TestRunOfTenAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's own allocations")
	}
	list := make([]Sandbox, 10)
	for i := range list {
		list[i] = sizeNoop("sb-" + strconv.Itoa(i))
	}
	var listings atomic.Int64
	p, err := New(ListFunc(func(context.Context) ([]Sandbox, error) {
		if listings.Add(1)%2 == 0 {
			return nil, nil
		}
		return list, nil
	}), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { p.Run(context.Background(), time.Time{}) }); n > 33 {
		t.Errorf("a Run of 10 without deadlines made %v allocations, more than 33", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if n := testing.AllocsPerRun(100, func() { p.Run(ctx, time.Now().Add(2*time.Hour)) }); n > 52 {
		t.Errorf("a Run of 10 with both deadlines made %v allocations, more than 52", n)
	}
}
