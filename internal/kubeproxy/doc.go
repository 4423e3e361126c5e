// Package kubeproxy is a Kubernetes Service on loopback, for tests of what
// a client behind one sees when a node drains. As kube-proxy does, it sends
// each new connection to an endpoint that is ready and leaves it there for
// as long as it is open: a node whose readiness turns leaves the endpoints
// for new connections only, and a client's open connection (HTTP
// keep-alive, an HTTP/2 or gRPC connection) stays with it.
//
// A test starts one over its nodes and points its client at the address:
//
//	svc := kubeproxy.Start(t, kubeproxy.Endpoint{Addr: a, Ready: aReady.Load},
//		kubeproxy.Endpoint{Addr: b, Ready: bReady.Load})
//	conn, err := net.Dial("tcp", svc)
//
// Guarantees: each new connection asks the endpoints' Ready in order, once
// each until one says so, and is relayed to the first that does, byte for
// byte both ways, until both ends closed (a half-close, CloseWrite, passed
// on: the other direction stays open, as kube-proxy's NAT leaves it); with
// none ready, or the node not answering the dial, the client's connection
// is closed at once, with nothing sent (a client sees EOF or a reset, as when kube-proxy has no
// endpoint). Nothing balances: the first ready endpoint gets every new
// connection. When the test ends the Service closes its listener and every
// connection, and returns once its goroutines have.
package kubeproxy
