// Package doccheck holds the test that keeps drainkit's documentation
// compiled: every Go code block in a package doc comment must appear, token
// for token (comments and line breaks aside), in a test file of the same
// package — an Example or a test, which the compiler checks and go test
// runs — and every ```go block in the repository's Markdown must appear in
// some test file of the module. A doc block that does not parse as Go
// (a shell command, a listing) is read as text and not checked.
//
// Run it with the rest of the tests:
//
//	go test ./internal/doccheck
package doccheck
