// Package usererr reads what a library's user hands back (an error, a
// value behind an interface) without letting it end the process: a typed
// nil (a nil *T returned as an error, Go's FAQ "Why is my nil error value
// not equal to nil?") whose methods dereference the nil, and an error
// whose Error or Unwrap panics (one that reads a field of an answer that
// never came). Met outside a recover, by a log line, errors.Is or a
// Report on a drain's goroutine, either ended the process mid-drain
// (docs/faults.md rows 1881, 1882, 1940). pause and drain each say what
// such a value becomes; this package only finds it.
package usererr
