package docker

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"deathwatch/supervisor"
)

func TestRunArgs(t *testing.T) {
	b := supervisor.Box{Name: "dw-1", Image: "img", WatcherPath: "/w",
		Labels: map[string]string{"io.deathwatch.nonce": "n", "io.deathwatch.instance": "i"}}
	got := runArgs("podman", &b, boxConf{userns: "auto"}, "/tmp/dw-run-1/cid")
	want := []string{"run", "--cidfile", "/tmp/dw-run-1/cid", "--detach-keys=", "--interactive", "--name", "dw-1", "--pull", "never", "--init=false", "--restart", "no", "--rm",
		"--log-driver", "none", "--cap-drop", "ALL", "--cap-add", "SETUID", "--cap-add", "SETGID", "--cap-add", "SETPCAP", "--cap-add", "KILL", "--cap-add", "CHOWN", "--cap-add", "DAC_OVERRIDE",
		"--security-opt", "no-new-privileges", "--userns", "auto", "--env", "GOMAXPROCS=1", "--env", "GODEBUG=profstackdepth=0",
		"--label", "io.deathwatch.instance=i", "--label", "io.deathwatch.nonce=n",
		"--network", "none", "--pids-limit", "4096", "--memory", "4294967296", "--memory-swap", "4294967296",
		"--read-only", "--tmpfs", "/tmp:rw,exec,nosuid,nodev,size=1073741824,mode=1777", "--shm-size", "268435456",
		"--volume", "/w:/dw/watcher:ro,nosuid,nodev", "--entrypoint", "/dw/watcher", "--", "img", "--control=stdin"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
	// The same box as create's: one description serves both.
	if c := createArgs("podman", &b, boxConf{userns: "auto"}); !reflect.DeepEqual(got[4:], c[1:]) {
		t.Errorf("run's box %q differs from create's %q", got[4:], c[1:])
	}
	// A live pipe: the client passes its descriptor 3, which the watcher
	// takes as --live-fd.
	live := runArgs("podman", &b, boxConf{userns: "auto", livePipe: true}, "/tmp/dw-run-1/cid")
	wantLive := append([]string{"run", "--cidfile", "/tmp/dw-run-1/cid", "--detach-keys=", "--preserve-fds", "1"}, want[4:]...)
	wantLive = append(wantLive, "--live-fd=3")
	if !reflect.DeepEqual(live, wantLive) {
		t.Errorf("live pipe:\n got %q\nwant %q", live, wantLive)
	}
}

func TestHeldWriter(t *testing.T) {
	var out bytes.Buffer
	h := &heldWriter{w: &out}
	h.Write([]byte("WARN first\n"))
	if out.Len() != 0 {
		t.Fatalf("passed on before release: %q", out.String())
	}
	h.release()
	h.Write([]byte("after\n"))
	if out.String() != "WARN first\nafter\n" || h.drop() != "" {
		t.Errorf("released: %q", out.String())
	}

	out.Reset()
	h = &heldWriter{w: &out}
	h.Write([]byte("Error: img: image not known\nmore\n"))
	if first := h.drop(); first != "Error: img: image not known" {
		t.Errorf("drop: %q", first)
	}
	h.Write([]byte("late\n"))
	h.release()
	if out.Len() != 0 {
		t.Errorf("dropped, yet passed on: %q", out.String())
	}

	h = &heldWriter{} // no writer: discard
	h.Write(make([]byte, heldMax+10))
	if h.held.Len() != heldMax {
		t.Errorf("held %d bytes, want at most %d", h.held.Len(), heldMax)
	}
	h.release()
	h.Write([]byte("x"))
}

// A one-step run's client proves its box removed only when it exited by
// itself and said nothing on stderr once the box existed.
func TestRunEndRemoved(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  string // the client ("": still running)
		before  string // written to stderr before the box existed
		release bool   // the box existed (its cidfile)
		after   string // written to stderr after
		proves  bool
	}{
		{"exit 0, silent", "exit 0", "", true, "", true},
		{"the box's status, silent", "exit 3", "", true, "", true},
		{"a removal that failed", "exit 0", "", true, `time="..." level=error msg="Removing container c: ..."` + "\n", false},
		{"a word held back", "exit 125", "Error: OCI runtime error\n", true, "", false},
		{"the box never existed", "exit 125", "", false, "", false},
		{"killed", "kill -KILL $$", "", true, "", false},
		{"still running", "", "", true, "", false},
		{"stderr still open", "exit 0", "", true, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &heldWriter{}
			h.Write([]byte(tc.before))
			if tc.release {
				h.release()
			}
			h.Write([]byte(tc.after))
			r := &runEnd{exited: make(chan struct{}), read: make(chan struct{}), err: new(error), stderr: h}
			if tc.script != "" {
				*r.err = exec.Command("sh", "-c", tc.script).Run()
				close(r.exited)
			}
			if tc.name != "stderr still open" {
				close(r.read)
			}
			if got := r.removed(); got != tc.proves {
				t.Errorf("removed() = %v, want %v (wait: %v)", got, tc.proves, *r.err)
			}
		})
	}
}

// A podman service (rootless `podman system service`) says whether it is
// rootless in its libpod info, not in the Docker-compatible /info.
func TestPodmanServiceProbe(t *testing.T) {
	for _, rootless := range []bool{true, false} {
		f := newFakeAPI(t)
		f.rootless = rootless
		e := &Engine{Kind: "podman", EngineEnv: []string{"CONTAINER_HOST=unix://" + f.sock}}
		info, err := e.Probe(context.Background())
		if err != nil || !info.Present || info.Version != "4.3.1" || info.Rootless != rootless {
			t.Errorf("rootless %v: probe %+v %v; calls %v", rootless, info, err, f.calls)
		}
		if _, one, _ := e.OneStep(context.Background()); one {
			t.Errorf("a podman service taken for one-step runs")
		}
	}
}

// A podman service on a local socket is rootless exactly when its
// listener is not root (SO_PEERCRED), its version from the _ping that
// settled the API version: no /info, no second _ping.
func TestPodmanServiceProbeLocal(t *testing.T) {
	f := newFakeAPI(t)
	f.libpod, f.rootless = true, os.Geteuid() == 0 // /libpod/info would say the opposite
	e := &Engine{Kind: "podman", EngineEnv: []string{"CONTAINER_HOST=unix://" + f.sock}}
	info, err := e.Probe(context.Background())
	if err != nil || !info.Present || info.Version != "4.3.1" || info.Rootless != (os.Geteuid() != 0) {
		t.Errorf("probe %+v %v", info, err)
	}
	pings := 0
	for _, c := range f.calls {
		if strings.HasSuffix(c, "/info") {
			t.Errorf("calls %v: asked %s", f.calls, c)
		}
		if strings.HasSuffix(c, "/_ping") {
			pings++
		}
	}
	if pings != 1 {
		t.Errorf("calls %v: %d pings, want 1", f.calls, pings)
	}
}
