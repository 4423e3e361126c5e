// Package keepaliveclose serves tests a net.Listener whose connections
// close, unread, when a request arrives on one after an answer was written
// on it: a server whose keep-alive timeout (Go's IdleTimeout, hyper's
// header-read timeout, nginx's keepalive_timeout, a proxy's) fires just
// as the client's next request on a kept-alive connection arrives, every
// time, where a real one does so now and then. The client has written its
// request and reads EOF with no answer; net/http sends a POST again only
// when no byte of it was written, so a client that reuses connections for
// requests it must not lose is caught at once.
//
// Typical wiring, under an httptest server:
//
//	srv := httptest.NewUnstartedServer(handler)
//	ln := keepaliveclose.Wrap(srv.Listener)
//	srv.Listener = ln
//	srv.Start()
//	... // the client's requests
//	ln.Dropped() // the requests that arrived on a kept-alive connection
//	ln.DroppedMethod("POST") // the ones of them a client must not send there
//
// Guarantees: the first request on a connection is always handed on, and
// so is whatever arrives before the server's first write on it; a request
// that is not handed on is counted before its connection closes.
package keepaliveclose
