// Package wrappedtransport is a test helper: a program's wrapper of
// http.DefaultTransport (otelhttp.NewTransport, a recording RoundTripper),
// which drainkit's own HTTP clients (pause/httpsource's Source, drain's
// exec hook) must neither panic on nor send through (internal/httpdefault;
// docs/faults.md rows 2620 and 2800). It counts the requests it passes on,
// so a test can say none went through it.
//
//	wrapper := wrappedtransport.Install(t) // http.DefaultTransport, until t's cleanup
//	... the client under test makes its requests ...
//	assert.Zero(t, wrapper.Requests(), "the client's own transport, not the program's wrapper")
package wrappedtransport
