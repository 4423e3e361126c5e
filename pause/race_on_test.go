//go:build race

package pause

const raceEnabled = true
