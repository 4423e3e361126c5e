// Package listenaddr checks the listen addresses the examples' servers
// take as flags: that one is host:port, saying so when an IPv6 address
// lacks its brackets (a manifest's "$(POD_IP):8082" on an IPv6 pod), and
// whether one is loopback, where a preStop hook needs no secret; whether
// two take the same port (a -hook-listen on -listen's); and
// that a hook's secret is none of the manifests' public placeholders.
package listenaddr
