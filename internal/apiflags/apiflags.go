package apiflags

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/drainkit/drainkit/pause/httpsource"
)

// EnvAPIKey is the environment variable the API key is read from, unless
// -api-key-file names a file. A key is never taken from the command line:
// argv is readable by every process on the node (/proc/PID/cmdline).
const EnvAPIKey = "DRAINKIT_API_KEY"

// The API shapes -api selects.
const (
	Generic  = "generic"
	AgentENV = "agentenv"
)

// DefaultServerURL is the default server URL per API shape: AgentENV's
// DaemonSet serves its API on port 8000.
var DefaultServerURL = map[string]string{
	Generic:  "http://127.0.0.1:8080",
	AgentENV: "http://127.0.0.1:8000",
}

// Flags are the server's API shape as the command line gives it: -api
// picks a preset, and the shape flags, when given, override single
// settings of it. Register them on a FlagSet, parse it, then call Finish.
type Flags struct {
	// API is the preset chosen with -api: Generic or AgentENV.
	API          string
	keyFile      string
	envKey       string // the key Finish took from EnvAPIKey
	listPath     string
	fallbackList string
	pausePath    string
	itemsField   string
	idField      string
	stateField   string
	sizeField    string
	sizeUnit     int64
	nextToken    string // "HEADER,PARAM"
	set          map[string]bool
}

// Register defines the flags on fs.
func (a *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&a.API, "api", Generic, "the server's API shape: generic or agentenv (AgentENV's node API: GET /v2/sandboxes pages, sandboxID, memoryMB)")
	fs.StringVar(&a.keyFile, "api-key-file", "", "file holding the API key sent as X-API-Key (default: the environment variable "+EnvAPIKey+")")
	fs.StringVar(&a.listPath, "list-path", "", "path that lists the sandboxes (GET) (default: the preset's; generic: /sandboxes)")
	fs.StringVar(&a.fallbackList, "fallback-list-path", "", "list path used once -list-path answers 404")
	fs.StringVar(&a.pausePath, "pause-path", "", "path that pauses one sandbox (POST); {id} is its ID (default: the preset's; generic: /sandboxes/{id}/pause)")
	fs.StringVar(&a.itemsField, "items-field", "", "field of the list answer holding the array (empty: the answer is the array)")
	fs.StringVar(&a.idField, "id-field", "", "field of a listed sandbox holding its ID (default: the preset's; generic: id)")
	fs.StringVar(&a.stateField, "state-field", "", "field of a listed sandbox holding its state (default: state; given empty: every listed sandbox is running)")
	fs.StringVar(&a.sizeField, "size-field", "", "numeric field of a listed sandbox holding its size (the memory a pause writes)")
	fs.Int64Var(&a.sizeUnit, "size-unit", 1<<20, "bytes per unit of -size-field")
	fs.StringVar(&a.nextToken, "next-token", "", "pagination: HEADER,PARAM (the answer's header with the next page's token, the query parameter that sends it back)")
}

// Finish validates the flags once fs is parsed, and takes the API key
// from EnvAPIKey unless -api-key-file names a file. Errors name the flag.
//
// Finish does not read -api-key-file: the file goes to httpsource as
// Config.APIKeyFile, and httpsource.New is its one reader, at start (a
// missing, unreadable or empty file fails New, naming the file) and again
// whenever a rotated Secret changes it. A second read here could see
// another version of the file than New's.
func (a *Flags) Finish(fs *flag.FlagSet) error {
	a.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { a.set[f.Name] = true })
	if _, ok := DefaultServerURL[a.API]; !ok {
		return fmt.Errorf("-api must be %s or %s, got %q", Generic, AgentENV, a.API)
	}
	if a.nextToken != "" {
		if h, p, ok := strings.Cut(a.nextToken, ","); !ok || h == "" || p == "" {
			return fmt.Errorf("-next-token must be HEADER,PARAM, got %q", a.nextToken)
		}
	}
	if a.sizeUnit <= 0 {
		return fmt.Errorf("-size-unit must be positive, got %d", a.sizeUnit)
	}
	if a.keyFile == "" {
		a.envKey = os.Getenv(EnvAPIKey)
	}
	return nil
}

// KeySource names where the API key comes from, for a message about a key
// the server refused: "-api-key-file PATH", EnvAPIKey, or "no key
// configured" when neither gives one.
func (a *Flags) KeySource() string {
	switch {
	case a.keyFile != "":
		return "-api-key-file " + a.keyFile
	case a.envKey != "":
		return EnvAPIKey
	}
	return "no key configured"
}

// Config returns the httpsource configuration of the shape: the preset
// (the zero Config for generic, httpsource.AgentENV for agentenv), with
// every shape flag given on the command line overriding its field, and the
// API key: -api-key-file as APIKeyFile (read by httpsource.New, and again
// when a rotated Secret changes it), else EnvAPIKey's value as APIKey.
// Call it after Finish.
func (a *Flags) Config() httpsource.Config {
	var c httpsource.Config
	if a.API == AgentENV {
		c = httpsource.AgentENV()
	}
	c.APIKey, c.APIKeyFile = a.envKey, a.keyFile
	set := func(name string, field *string, v string) {
		if a.set[name] {
			*field = v
		}
	}
	set("list-path", &c.ListPath, a.listPath)
	set("fallback-list-path", &c.FallbackListPath, a.fallbackList)
	set("pause-path", &c.PausePath, a.pausePath)
	set("items-field", &c.ItemsField, a.itemsField)
	set("id-field", &c.IDField, a.idField)
	if a.set["state-field"] {
		c.StateField, c.NoStateField = a.stateField, a.stateField == ""
	}
	if a.set["size-field"] || a.set["size-unit"] {
		set("size-field", &c.SizeField, a.sizeField)
		c.SizeUnit = a.sizeUnit
	}
	if a.set["next-token"] && a.nextToken != "" {
		c.PageTokenHeader, c.PageTokenParam, _ = strings.Cut(a.nextToken, ",")
	}
	return c
}
