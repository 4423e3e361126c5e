//go:build race

package kubeletsim

const raceEnabled = true
