// Package durflag holds the flags drainkit's commands take time in, whose
// errors say what is wanted where the flag package says only "parse
// error":
//
//   - GraceVar, a grace period as the pod's manifest gives it, whole
//     seconds (-grace 30, terminationGracePeriodSeconds), or as a Go
//     duration (-grace 30s, 1m30s, 100ms); it must be positive.
//     ParseGrace is the same parse, for an environment variable or a file.
//   - DurationVar, a Go duration, as flag.FlagSet.DurationVar takes it; a
//     bare number is refused naming the units it needs.
package durflag
