// Package doccheck holds the test that keeps drainkit's documentation
// compiled: every Go code block in a package doc comment must appear, token
// for token (comments and line breaks aside), in a test file of the same
// package — an Example or a test, which the compiler checks and go test
// runs — and every ```go block in the repository's Markdown must appear in
// some test file of the module. A doc block that does not parse as Go
// (a shell command, a listing) is read as text and not checked.
//
// It also keeps the documentation's evidence real: a ```yaml block that
// names a repository file must be that file; every test, benchmark, fuzz
// target or example that README.md, docs/*.md and the examples' READMEs
// cite, by name (in a code span or in the prose, where a name after "was
// named" is one a test had) or in a -run, -bench or -skip pattern, must be
// a func of the module's test files, since a renamed test leaves a fault's
// row pointing at nothing to run; and every relative link of the Markdown
// must name a file of the repository, and its #anchor a heading of the
// page, since a moved file or a reworded heading leaves the reader at
// nothing.
//
// And it keeps the project's definition of done, package by package: every
// package of the module has a doc.go, an Example function in its test files,
// and, where it has tests, a TestMain that runs them under
// goleak.VerifyTestMain; every exported name (package-level, or a method of
// an exported type, as internal/exported reads them) has a doc comment.
//
// Run it with the rest of the tests:
//
//	go test ./internal/doccheck
package doccheck
