package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	boxcopy "deathwatch/supervisor/copy"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/hostcheck"
)

// parseCopies reads --copy-in HOST:BOX and --copy-out BOX:HOSTDIR.
func parseCopies(in, out []string) ([]boxcopy.CopyIn, []boxcopy.CopyOut, error) {
	var cin []boxcopy.CopyIn
	var cout []boxcopy.CopyOut
	split := func(flag, s, want string) (string, string, error) {
		a, b, ok := strings.Cut(s, ":")
		if !ok || a == "" || b == "" || strings.Contains(b, ":") {
			return "", "", exitcode.Usage("%s %q: want %s (no ':' inside paths)", flag, s, want)
		}
		return a, b, nil
	}
	boxPath := func(flag, s, p string) error {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" || strings.ContainsRune(p, 0) {
			return exitcode.Usage("%s %q: %q is not a clean absolute path below / in the box", flag, s, p)
		}
		return nil
	}
	for _, s := range in {
		host, box, err := split("--copy-in", s, "HOSTPATH:BOXPATH")
		if err != nil {
			return nil, nil, err
		}
		if err := boxPath("--copy-in", s, box); err != nil {
			return nil, nil, err
		}
		cin = append(cin, boxcopy.CopyIn{Host: host, Box: box})
	}
	for _, s := range out {
		box, dir, err := split("--copy-out", s, "BOXPATH:HOSTDIR")
		if err != nil {
			return nil, nil, err
		}
		if err := boxPath("--copy-out", s, box); err != nil {
			return nil, nil, err
		}
		cout = append(cout, boxcopy.CopyOut{Box: box, HostDir: dir})
	}
	return cin, cout, nil
}

// stage applies --stage to the copy-ins: copy streams them; bind makes
// each a read-only bind mount, which only a proof allows (the nonce
// probe of doctor, from inside a real box of this runtime, for the
// copy-in's folder); auto binds where proven and copies elsewhere.
// Copy-outs always stream: a writable bind would let the agent write
// on the host.
// stagingProbe is the bind proof (hostcheck.StagingProbe) for dir on
// runtime, with this exec's image, watcher and engine.
func (e *ExecCmd) stagingProbe(ctx context.Context, g *Globals, c *cmdContext, o *supervisor.ExecOptions, env []string, runtime, dir string) *hostcheck.DoctorStaging {
	return hostcheck.StagingProbe(ctx, runtime, &hostcheck.DoctorOptions{
		Image: o.Image, Staging: dir, AllowRootful: o.AllowRootful, Timeout: 60 * time.Second,
		Instance: g.Instance, JournalDir: g.journalDir(),
	}, o.WatcherPath, o.WatcherInImage, engineEnv(env, e.Env), g.logger(c.stderr))
}

func (e *ExecCmd) stage(ctx context.Context, g *Globals, c *cmdContext, o *supervisor.ExecOptions, cp *boxcopy.Copies, env []string) error {
	if e.Stage == "copy" || len(cp.In) == 0 {
		return nil
	}
	var keep []boxcopy.CopyIn
	for _, ci := range cp.In {
		dir := ci.Host
		if fi, err := os.Stat(dir); err != nil {
			return exitcode.With(shared.ExitCopyFailed, fmt.Errorf("--copy-in %s:%s: refused: %w", ci.Host, ci.Box, err))
		} else if !fi.IsDir() {
			dir = filepath.Dir(dir)
		}
		abs, err := filepath.Abs(ci.Host)
		if err != nil {
			return exitcode.Usage("--copy-in %s: %w", ci.Host, err)
		}
		st := e.stagingProbe(ctx, g, c, o, env, o.Runtime, dir)
		switch {
		case st.Mode == "bind":
			o.Mounts = append(o.Mounts, supervisor.Mount{Source: abs, Target: ci.Box, ReadOnly: true})
		case e.Stage == "bind":
			return exitcode.Refused("--stage bind: runtime %s is not proven to share %s with the box (%s); use --stage copy or auto", o.Runtime, dir, st.Detail)
		default:
			keep = append(keep, ci)
		}
	}
	cp.In = keep
	return nil
}
