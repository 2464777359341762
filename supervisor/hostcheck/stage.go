package hostcheck

import (
	"context"
	"log/slog"
)

// StagingProbe is doctor's bind-vs-copy proof for one runtime and one
// staging folder (d.Staging), for exec --stage: Mode "bind" only when a
// nonce file written there was read back from inside a real box.
func StagingProbe(ctx context.Context, runtime string, d *DoctorOptions, watcher, watcherInImage string, env []string, log *slog.Logger) *DoctorStaging {
	return stagingProbe(ctx, runtime, d, watcher, watcherInImage, env, log)
}
