//go:build !linux

package ready

// Take does nothing outside Linux, where no built-in init runs.
func Take(string) {}

// Ready does nothing outside Linux: no init holds the program's signals.
func Ready() {}
