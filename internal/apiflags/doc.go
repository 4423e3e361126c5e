// Package apiflags is the command line of a sandbox server's HTTP API
// shape, shared by the programs that reach a server through
// pause/httpsource (the supervisor, drainkit plan), so that both read the
// server the same way:
//
//	var api apiflags.Flags
//	api.Register(fs)
//	_ = fs.Parse(args)
//	_, err := api.Finish(fs) // validates, reads the API key once
//	src, err := httpsource.New(url, api.Config()) // the key with it, its file read again when it changes
//
// -api picks a preset (generic, or AgentENV's node API); the shape flags
// (-list-path, -id-field, -size-field, ...) override single settings of
// it. The API key comes from -api-key-file or the environment, never from
// argv; a key file is read again whenever a rotated Secret changes it.
package apiflags
