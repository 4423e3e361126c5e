// Package exported lists the names a Go file exports, as a user of its package
// names them, with whether each has a doc comment. internal/cmd/surface counts
// them (the public surface is capped) and internal/doccheck fails on any
// without a doc comment, from this one reading of the declarations:
//
//	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
//	for _, n := range exported.Names(f) {
//		if !n.Doc && !n.Member {
//			fmt.Printf("%s: %s has no doc comment\n", fset.Position(n.Pos), n.Name)
//		}
//	}
//
// Guarantees: every exported package-level constant, variable, function and
// type, every exported method of an exported type, and every exported field
// or interface method of an exported type is listed once per declaration, in
// the file's order; a method of an unexported type is not (no user can name
// it). Doc is read from the comments the parser kept: a file parsed without
// parser.ParseComments has none.
package exported
