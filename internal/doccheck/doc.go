// Package doccheck holds the test that keeps drainkit's documentation
// compiled: every Go code block in a package doc comment must appear, token
// for token (comments and line breaks aside), in a test file of the same
// package — an Example or a test, which the compiler checks and go test
// runs — and every ```go block in the repository's Markdown must appear in
// some test file of the module. A doc block that does not parse as Go
// (a shell command, a listing) is read as text and not checked.
//
// It also keeps the documentation's evidence real: a ```yaml block that
// names a repository file must be that file, and every test, benchmark,
// fuzz target or example that README.md, docs/*.md and the examples'
// READMEs cite, by name or in a -run or -bench pattern, must be a func of
// the module's test files, since a renamed test leaves a fault's row
// pointing at nothing to run.
//
// Run it with the rest of the tests:
//
//	go test ./internal/doccheck
package doccheck
