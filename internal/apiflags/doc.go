// Package apiflags is the command line of a sandbox server's HTTP API
// shape, shared by the programs that reach a server through
// pause/httpsource (the supervisor, drainkit plan), so that both read the
// server the same way:
//
//	var api apiflags.Flags
//	api.Register(fs)
//	_ = fs.Parse(args)
//	err := api.Finish(fs)                         // validates; the key from the environment
//	src, err := httpsource.New(url, api.Config()) // the key with it: -api-key-file read here, and again when it changes
//
// -api picks a preset (generic, or AgentENV's node API); the shape flags
// (-list-path, -id-field, -size-field, ...) override single settings of
// it. The API key comes from -api-key-file or the environment, never from
// argv. A key file has one reader, httpsource: New reads it (and fails,
// naming it, when it is missing, unreadable or empty), and the Source reads
// it again whenever a rotated Secret changes it.
package apiflags
