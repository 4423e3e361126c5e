// Package signame names a signal as a person writes it ("SIGTERM", not
// Go's "terminated"), for the lines and Reports that say which signal
// came: drain's Report.Signals and the examples' start-up catcher
// (internal/startsig).
package signame
