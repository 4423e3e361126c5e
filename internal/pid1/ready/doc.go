// Package ready is the program's side of the built-in init's ready pipe (internal/pid1):
// the init holds every signal for the program it started until the program calls Ready,
// once it handles SIGTERM. internal/startsig's Catch calls it after its signal.Notify.
//
// It is a package of its own, apart from pid1, so that a program that handles its
// signals through startsig imports it and not pid1, whose initialisation catches every
// signal of a PID 1 for Init to forward (a program as PID 1 that imported pid1 and never
// called Init would get none).
package ready
