package gatevia_test

import (
	"fmt"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/gatevia"
)

// draingrpc's interceptor enters the gate for a gRPC create: admitted while
// the gate is open, refused once the node drains, the refusal counted as
// gRPC's in the drain's Report.
func Example() {
	g := &drain.Gate{}
	leave, err := gatevia.EnterGRPC(g, string(drain.Create))
	fmt.Println("open:", err, g.InFlight(drain.Create))
	leave()
	g.Close()
	_, err = gatevia.EnterGRPC(g, string(drain.Create))
	fmt.Println("draining:", err)
	// Output:
	// open: <nil> 1
	// draining: drain: node is draining, not accepting new work (create)
}
