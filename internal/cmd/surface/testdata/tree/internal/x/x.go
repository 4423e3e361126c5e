// Package x is internal: nothing in it counts.
package x

// Secret is exported but internal.
func Secret() {}
