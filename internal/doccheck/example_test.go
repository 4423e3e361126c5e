package doccheck

import (
	"fmt"
	"strings"
)

// A doc block is compiled when its tokens appear, in order, in a test file:
// layout and comments aside. One whose argument drifted from the test is
// not, and a shell command is not Go, so it is left alone.
func Example() {
	tests := map[string][]string{"": {tokens("d, err := drain.New(drain.Config{Grace: 30 * time.Second})\nif err != nil {\n\treturn err\n}\n")}}
	for _, code := range []string{
		"d, err := drain.New(drain.Config{Grace: 30 * time.Second}) // the budget\nif err != nil { return err }",
		"d, err := drain.New(drain.Config{Grace: 20 * time.Second})",
		"go test ./internal/doccheck",
	} {
		first, _, _ := strings.Cut(code, "\n")
		switch {
		case !isGo(code):
			fmt.Printf("not Go, not checked:   %s\n", first)
		case foundIn(tokens(code), "", tests):
			fmt.Printf("in a test file:        %s\n", first)
		default:
			fmt.Printf("in no test file:       %s\n", first)
		}
	}
	// Output:
	// in a test file:        d, err := drain.New(drain.Config{Grace: 30 * time.Second}) // the budget
	// in no test file:       d, err := drain.New(drain.Config{Grace: 20 * time.Second})
	// not Go, not checked:   go test ./internal/doccheck
}
