package gaterefusals_test

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/drainkit/drainkit/internal/gaterefusals"
)

// The account as drain makes it and as a Report file gives it back: the same
// kinds, in the same order.
func Example() {
	made := &gaterefusals.Detail{Refused: 4, By: map[string]map[string]int{
		"http": {"stream": 1, "create": 2}, "grpc": {"create": 1}}, FirstPhase: "drain", LastPhase: "preserve"}
	b, _ := json.Marshal(made)
	var file any // what a Report read back from its JSON holds in Detail
	_ = json.Unmarshal(b, &file)

	for _, detail := range []any{made, file} {
		d, ok := gaterefusals.Read(detail)
		if ok && d.Refused > 0 {
			fmt.Println(strings.Join(d.Kinds(), ", "))
		}
	}
	// Output:
	// grpc create 1, http create 2, http stream 1
	// grpc create 1, http create 2, http stream 1
}
