package pause_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/pause"
)

// vm is what a server's own sandbox type looks like to the Preserver.
type vm struct {
	id       string
	memoryMB int
	paused   atomic.Bool
}

func (v *vm) ID() string { return v.id }

// EstimatedPreserve: writing memory out dominates a pause.
func (v *vm) EstimatedPreserve() time.Duration {
	return time.Duration(v.memoryMB) * 20 * time.Microsecond
}

// Preserve pauses the VM and writes its state; here it just takes the
// estimated time, and honours its context as a real one must.
func (v *vm) Preserve(ctx context.Context) error {
	select {
	case <-time.After(v.EstimatedPreserve()):
		v.paused.Store(true)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Preserve every running VM of a node, 8 at a time (up to 16 if the time
// left demands it), before the preserve phase's deadline.
func Example() {
	vms := []*vm{{id: "vm-a", memoryMB: 512}, {id: "vm-b", memoryMB: 2048}, {id: "vm-c", memoryMB: 1024}, {id: "vm-d", memoryMB: 256}}
	// The VMs not yet paused, as a server lists them. List may be called
	// twice at once (a second call beside one slow to answer): it reads
	// state that is safe for that, and writes none.
	list := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		var running []pause.Sandbox
		for _, v := range vms {
			if !v.paused.Load() {
				running = append(running, v)
			}
		}
		return running, nil
	})
	pauses := deadline.NewEstimator(2 * time.Second)
	preserver, err := pause.New(list, pause.Config{Limit: 8, MaxLimit: 16, Estimator: pauses})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // the phase deadline
	defer cancel()
	report := preserver.Run(ctx, time.Now().Add(40*time.Second)) // the budget's deadline
	fmt.Println("preserved:", report.Counts[pause.Preserved], "lost:", report.Lost())
	for _, e := range report.Entries {
		fmt.Println(e.ID, e.Outcome)
	}
	// Output:
	// preserved: 4 lost: 0
	// vm-a preserved
	// vm-b preserved
	// vm-c preserved
	// vm-d preserved
}

// An entry names itself as the lines about lost sandboxes do: the drain's
// log line and SandboxesLost Event, the termination message, the
// supervisor's sweep.
func ExampleEntry_String() {
	fmt.Println(pause.Entry{ID: "sb-7", Outcome: pause.Failed})
	fmt.Println(pause.Entry{Outcome: pause.Failed}) // listed without an ID
	// Output:
	// sb-7(failed)
	// (no ID)(failed)
}
