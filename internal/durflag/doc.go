// Package durflag is the grace-period flag of drainkit's commands:
// GraceVar takes a grace period as the pod's manifest gives it, whole
// seconds (-grace 30, terminationGracePeriodSeconds), or as a Go duration
// (-grace 30s, 1m30s, 100ms), and its error says what is wanted where
// flag.FlagSet.DurationVar says only "parse error" and refuses -grace 30.
// ParseGrace is the same parse, for an environment variable or a file.
package durflag
