package exported_test

import (
	"fmt"
	"go/parser"
	"go/token"

	"github.com/drainkit/drainkit/internal/exported"
)

// Each exported name a file declares, and those without a doc comment, as
// internal/doccheck reports them.
func Example() {
	const path = "step.go"
	src := `package drain

// A Step is one teardown action.
type Step interface {
	Run() error // does the work
}

func NewStep() Step { return nil }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		panic(err)
	}
	for _, n := range exported.Names(f) {
		if !n.Doc && !n.Member {
			fmt.Printf("%s: %s has no doc comment\n", fset.Position(n.Pos), n.Name)
		}
	}
	// Output:
	// step.go:8:6: NewStep has no doc comment
}
