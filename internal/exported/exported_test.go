package exported_test

import (
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/exported"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const src = `package p

// A is documented.
const A, b = 1, 2

// The group's comment covers its names.
var (
	V int
	W int
)

const (
	X = 1 // at the line's end
	Y = 2
)

type T struct {
	// F has its own.
	F int
	G int // at the line's end
	H, h int
}

// M is T's.
func (T) M() {}

func (*T) N() {}

func (t) Hidden() {}

type t struct{ X int }

// I is an interface.
type I interface {
	Do()
	do()
}

type G[K any] struct{}

func (G[K]) Get() {}

func New() T { return T{} }
`

// Every exported name a user can name is listed once, in the file's order, with
// whether it has a doc comment; a method of an unexported type is not.
func TestNamesListsWhatAUserCanNameWithItsDoc(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments|parser.SkipObjectResolution)
	require.NoError(t, err)
	type row struct {
		name        string
		member, doc bool
	}
	var got []row
	for _, n := range exported.Names(f) {
		got = append(got, row{n.Name, n.Member, n.Doc})
	}
	assert.Equal(t, []row{
		{"A", false, true},
		{"V", false, true}, {"W", false, true},
		{"X", false, true}, {"Y", false, false},
		{"T", false, false}, {"T.F", true, true}, {"T.G", true, true}, {"T.H", true, false},
		{"T.M", false, true},
		{"T.N", false, false},
		{"I", false, true}, {"I.Do", true, false},
		{"G", false, false},
		{"G.Get", false, false},
		{"New", false, false},
	}, got)
	assert.Equal(t, "p.go:4:7", fset.Position(exported.Names(f)[0].Pos).String(), "A's position")
}

// Without parser.ParseComments no name has a doc comment: the parser kept none.
func TestNamesWithoutCommentsFindsNoDoc(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.SkipObjectResolution)
	require.NoError(t, err)
	for _, n := range exported.Names(f) {
		assert.False(t, n.Doc, n.Name)
	}
}
