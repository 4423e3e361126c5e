package pause

import (
	"context"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
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

// A Run of 10 no-ops makes 18 allocations without deadlines, 32 with both
// (docs/preserve.md): the contexts that follow Tighten cost none. Without
// deadlines it made 25 until row 1883, which makes each listing's call
// beside the Run's goroutine, as with deadlines (its channel and the
// call's goroutine, four a listing), so that a Tighten bounds it; 33 then,
// until a listing's answer was no longer moved to the heap (one a listing,
// 46 → 44 with deadlines too) and a Run under a context nothing cancels,
// given no deadline, made one context where it made the phase's and the
// Preserves' apart (four): 27 and 44, until the Run goroutine had one
// channel to be woken by where it had one for room, one for a Tighten and
// one a pass, and a pass over before it is awaited arms no timer for the
// hard deadline (three, with deadlines); 25 and 39 until a listing whose
// every call answered left its channel to the next (two); 23 and 37 until
// a listing's calls left their answers in a listCalls and woke the Run
// goroutine through run.wake, where they sent them on a channel (one);
// 22 and 36 until a Run took from the Run before its set of IDs' table,
// its last listing's IDs by index, its listCalls and its semaphore
// (runSpare: four).
//
// Under -race it measures in a build without the race detector, whose
// allocations are not a user's (withoutRace).
func TestRunOfTenAllocations(t *testing.T) {
	if !withoutRace(t) {
		return
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
	if n := testing.AllocsPerRun(100, func() { p.Run(context.Background(), time.Time{}) }); n > 18 {
		t.Errorf("a Run of 10 without deadlines made %v allocations, more than 18", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if n := testing.AllocsPerRun(100, func() { p.Run(ctx, time.Now().Add(2*time.Hour)) }); n > 32 {
		t.Errorf("a Run of 10 with both deadlines made %v allocations, more than 32", n)
	}
}

// stackNoop is a no-op sandbox that records where its Preserve's frame
// lies on its worker's stack: a stack that grew was copied elsewhere, and
// a local of the next Preserve on that worker lies elsewhere too.
type stackNoop struct {
	id   string
	at   *[10]uintptr
	next *atomic.Int32
}

func (s stackNoop) ID() string { return s.id }

func (s stackNoop) Preserve(context.Context) error {
	var local byte
	s.at[s.next.Add(1)-1] = uintptr(unsafe.Pointer(&local))
	return nil
}

// A worker preserves and settles no-op sandboxes on the 2 KiB stack a
// goroutine starts with: copying a stack that grew was a tenth of a Run
// of 10 no-ops' CPU (docs/preserve.md, "Cutting the Run's own cost").
// recover's frame, called on every preserve whether or not it panicked,
// and ended's, on every preserve that succeeded, each passed what a
// worker's frames leave of it, until both were called only when needed.
//
// 10 sandboxes to at most 8 workers (the adaptive limit's start, here its
// ceiling too): a worker preserves two at least, and the second, past a
// growth, lies elsewhere. So the Preserves lie at no more places than
// there are workers, the goroutines the Run started but its two
// listings' calls. Under a higher ceiling a Preserver's first Run, whose
// first epochs compare levels (pays, measured), still grows the stack of
// the worker that decides them, once in the Preserver's life: a later Run
// (as each of the benchmarks' but their first) starts at the level
// learned and does not.
//
// The Run is measured in a child process that starts every goroutine on
// 2 KiB (GODEBUG adaptivestackstart=0, onFirstStacks): by default the
// runtime starts one on the average stack of those its last GC scanned,
// and after deep stacks (a test before this one) the workers started on
// a larger one, which no preserve grows, recover or not: the test passed with
// recover called on every preserve (docs/faults.md row 2261), and a GC
// that shrank a worker's stack mid-Run moved its next Preserve elsewhere.
// Under -race the child is a build without the race detector, whose
// frames are larger (withoutRace).
func TestAWorkerPreservesNoOpsOnItsFirstStack(t *testing.T) {
	if !onFirstStacks(t) {
		return
	}
	stacksDeepAtAGC() // a server's goroutines, or a test's before this one
	var at [10]uintptr
	var next atomic.Int32
	list := make([]Sandbox, len(at))
	for i := range list {
		list[i] = stackNoop{"sb-" + strconv.Itoa(i), &at, &next}
	}
	var listings atomic.Int64
	p, err := New(ListFunc(func(context.Context) ([]Sandbox, error) {
		if listings.Add(1)%2 == 0 {
			return nil, nil
		}
		return list, nil
	}), Config{MaxLimit: DefaultLimit})
	if err != nil {
		t.Fatal(err)
	}
	created := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(created)
	before := created[0].Value.Uint64()
	rep := p.Run(context.Background(), time.Time{})
	metrics.Read(created)
	if rep.Counts[Preserved] != len(at) || rep.Passes != 2 {
		t.Fatalf("preserved %d of %d in %d passes, want all in 2", rep.Counts[Preserved], len(at), rep.Passes)
	}
	workers := int(created[0].Value.Uint64()-before) - rep.Passes // one call per listing
	places := make(map[uintptr]bool)
	for _, a := range at {
		places[a] = true
	}
	if len(places) > workers {
		t.Errorf("10 Preserves lay at %d places on the stacks of %d workers: a worker's stack grew as it preserved no-ops", len(places), workers)
	}
}

// firstStacksChild is set in the environment of the child process that
// onFirstStacks runs a test in.
const firstStacksChild = "DRAINKIT_PAUSE_FIRST_STACKS"

// onFirstStacks reports whether t runs in a process whose goroutines all
// start on the runtime's least stack, 2 KiB, so that a worker's stack that
// grows is seen, and which has no race detector. Otherwise it runs t alone
// in a child process that does, of this test binary or, under -race, of
// this package's tests built without it (binaryWithoutRace), fails t with
// the child's output if the child fails, and reports false: t is over.
func onFirstStacks(t *testing.T) bool {
	t.Helper()
	if os.Getenv(firstStacksChild) != "" && !raceEnabled {
		return true
	}
	bin := os.Args[0]
	if raceEnabled {
		bin = binaryWithoutRace(t)
	}
	godebug := "adaptivestackstart=0" // last: the runtime takes the last setting of a key
	if was := os.Getenv("GODEBUG"); was != "" {
		godebug = was + "," + godebug
	}
	runAlone(t, bin, "in a child process whose goroutines start on 2 KiB", firstStacksChild+"=1", "GODEBUG="+godebug)
	return false
}

// stacksDeepAtAGC has 64 goroutines 16 KiB deep alive at a GC, from whose
// stacks the runtime by default picks the stack a goroutine starts on,
// and returns once they have ended.
func stacksDeepAtAGC() {
	var deep, ended sync.WaitGroup
	park := make(chan struct{})
	for range 64 {
		deep.Add(1)
		ended.Go(func() { deepFrames(32, &deep, park) })
	}
	deep.Wait()
	runtime.GC()
	close(park)
	ended.Wait()
}

// deepFrames says it is deep, then waits for park, under n frames of 512
// bytes.
//
//go:noinline
func deepFrames(n int, deep *sync.WaitGroup, park <-chan struct{}) byte {
	var frame [512]byte
	if n == 0 {
		deep.Done()
		<-park
		return frame[0]
	}
	return deepFrames(n-1, deep, park) + frame[n%len(frame)]
}
