//go:build !race

package vmtest

// raceEnabled is true when this binary was built with -race; the guest
// /init is then built with -race too.
const raceEnabled = false
