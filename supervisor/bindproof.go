package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"deathwatch/supervisor/internal/firstline"
	"deathwatch/supervisor/internal/instance"
	"deathwatch/supervisor/internal/launchid"
)

// bindProofTimeout bounds one bind proof: its probe box gets half of it
// to read the nonce back.
const bindProofTimeout = 60 * time.Second

// proofKey marks the context of a bind proof's own launch, which runs
// no proof of its own.
type proofKey struct{}

// ProveBind is the bind proof for dir on runtime: a nonce file written
// in dir, bind-mounted read-only into a real box of that runtime (with
// o's image, watcher, engine, instance and journal), must read back the
// same from inside. It says whether it held and why; it is the default
// ExecIO.ProveBind.
func ProveBind(ctx context.Context, o ExecOptions, runtime, dir string, timeout time.Duration) (ok bool, detail string) {
	log := o.WithDefaults().IO.Log
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, err.Error()
	}
	// Readable by the agent's uid, which is not ours.
	os.Chmod(abs, 0o755)
	nonce := launchid.Hex(16)
	name := ".deathwatch-probe-" + nonce
	p := filepath.Join(abs, name)
	if err := os.WriteFile(p, []byte(nonce+"\n"), 0o644); err != nil {
		return false, fmt.Sprintf("cannot write the probe file: %v", err)
	}
	defer os.Remove(p)

	var out, errb bytes.Buffer
	var removal string // the probe box's removal that failed
	cctx, cancel := context.WithTimeout(context.WithValue(ctx, proofKey{}, true), timeout)
	defer cancel()
	r, err := Exec(cctx, ExecOptions{
		Instance: instance.Probe(o.Instance), JournalDir: o.JournalDir, Runtime: runtime, Image: o.Image,
		NamePrefix: "dw-probe", Network: "none", Grace: time.Second, Deadline: timeout / 2,
		Mounts:       []Mount{{Source: abs, Target: "/tmp/dw-staging", ReadOnly: true}},
		AllowRootful: o.AllowRootful, WatcherPath: o.WatcherPath, WatcherInImage: o.WatcherInImage,
		Argv: []string{"cat", "/tmp/dw-staging/" + name},
		IO: ExecIO{Stdout: &out, Stderr: &errb, Log: log, EngineEnv: o.IO.EngineEnv, Signals: make(chan os.Signal), OnEvent: func(ev Event) {
			if ev.Event == EventRemoved && ev.Error != "" {
				removal = ev.Error
			}
		}},
	})
	code := r.Code
	if err != nil {
		fmt.Fprintf(&errb, "%v\n", err)
	}
	if removal != "" {
		// Said, not swallowed with the probe's stderr: the box is left.
		log.Warn("the staging probe's box was not removed; `supervisor reconcile` removes it", "instance", instance.Probe(o.Instance), "error", removal)
	}
	got := strings.TrimSpace(out.String())
	switch {
	case code == 0 && got == nonce:
		return true, "the nonce file was read back from inside the box: the box sees the controller's files"
	case code == 0:
		return false, "the box read another file at the same path: not the controller's file system"
	default:
		return false, fmt.Sprintf("the nonce file could not be read from inside the box (exit %d: %s)", code, firstline.Of(lastLine(errb.String())))
	}
}

// defaultProof is the bind prover of a launch of o whose ExecIO has
// none: ProveBind with o's settings, except inside a bind proof's own
// launch, which proves nothing.
func defaultProof(ctx context.Context, o ExecOptions) BindProver {
	if o.IO.ProveBind != nil {
		return o.IO.ProveBind
	}
	if ctx.Value(proofKey{}) != nil {
		return nil
	}
	return func(ctx context.Context, runtime, dir string) (bool, string) {
		return ProveBind(ctx, o, runtime, dir, bindProofTimeout)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
