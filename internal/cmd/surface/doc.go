// Command surface counts the exported identifiers of drainkit's public
// packages — every package outside internal/, examples/ and the commands —
// so the README's figure comes from the code, not from a guess:
//
//	go run ./internal/cmd/surface        # a line per package, then the total
//	go run ./internal/cmd/surface -v     # and every identifier
//
// It counts what a user can name: exported package-level constants,
// variables, functions and types, the exported methods of exported types,
// and the exported fields of exported struct types, as internal/exported
// reads them (internal/doccheck checks each has a doc comment from the same
// reading). Test files are left out.
package main
