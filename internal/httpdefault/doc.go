// Package httpdefault gives drainkit's own HTTP clients (pause/httpsource's
// Source, drain's exec hook) the transport they start from: a copy of
// http.DefaultTransport with whatever a program set on it (a proxy, TLS
// roots), or, when a program put another RoundTripper there (a wrapper
// such as otelhttp's, a recorder), a new transport with the settings
// net/http gives its default. A wrapper may send a request anywhere and
// hold none of what these clients guarantee of net/http's transport
// (docs/faults.md rows 2620 and 2800: asserted unchecked, it panicked
// them), so it is not used; a program whose requests must go through it
// sets the client's own Client field.
package httpdefault
