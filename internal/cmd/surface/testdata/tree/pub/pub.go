// Package pub is a public package of the example module.
package pub

// A Config is exported, with one exported field.
type Config struct {
	Limit int
	debug bool
}

// New is exported; its helper is not.
func New(c Config) *Config { return helper(c) }

func helper(c Config) *Config { return &c }
