package runsc_test

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/runsc"
)

// Every command of a Runtime runs against its own --root, without network.
func ExampleRuntime_GlobalFlags() {
	rt := &runsc.Runtime{Root: "/run/drainkit/runsc", Platform: "ptrace"}
	fmt.Println(rt.GlobalFlags())
	// Output: [--root=/run/drainkit/runsc --network=none --platform=ptrace]
}
