//go:build linux

package main

import (
	"slices"
	"strings"

	"github.com/drainkit/drainkit/internal/apiflags"
)

// EnvAPIKey is the environment variable the API key is read from, unless
// -api-key-file names a file (see apiflags).
const EnvAPIKey = apiflags.EnvAPIKey

// The API shapes -api selects.
const (
	APIGeneric  = apiflags.Generic
	APIAgentENV = apiflags.AgentENV
)

// apiFlags is the server's API shape as the command line gives it, the
// same flags drainkit plan reads the server with.
type apiFlags = apiflags.Flags

// childEnv is the environment the supervisor's children get: its own,
// without the API key and the hook secret, which are the supervisor's
// credentials and not the server's.
func childEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, EnvAPIKey+"=") || strings.HasPrefix(kv, EnvHookSecret+"=")
	})
}
