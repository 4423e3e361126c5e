package drain

import "log/slog"

// slogLevel is Info for a clean shutdown and Error for one that lost
// sandboxes, failed a step or ran past SIGKILL.
func slogLevel(r *Report) slog.Level {
	if r.Err() != nil {
		return slog.LevelError
	}
	return slog.LevelInfo
}
