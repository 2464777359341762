package docker

import (
	"bytes"
	"reflect"
	"testing"

	"deathwatch/supervisor"
)

func TestRunArgs(t *testing.T) {
	b := supervisor.Box{Name: "dw-1", Image: "img", WatcherPath: "/w",
		Labels: map[string]string{"io.deathwatch.nonce": "n", "io.deathwatch.instance": "i"}}
	got := runArgs("podman", &b, "auto", "/tmp/dw-run-1/cid")
	want := []string{"run", "--cidfile", "/tmp/dw-run-1/cid", "--interactive", "--name", "dw-1", "--pull", "never", "--init=false", "--restart", "no", "--rm",
		"--log-driver", "none", "--cap-drop", "ALL", "--cap-add", "SETUID", "--cap-add", "SETGID", "--cap-add", "SETPCAP", "--cap-add", "KILL", "--cap-add", "CHOWN", "--cap-add", "DAC_OVERRIDE",
		"--security-opt", "no-new-privileges", "--userns", "auto", "--env", "GOMAXPROCS=1",
		"--label", "io.deathwatch.instance=i", "--label", "io.deathwatch.nonce=n",
		"--network", "none", "--volume", "/w:/dw/watcher:ro", "--entrypoint", "/dw/watcher", "--", "img", "--control=stdin"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
	// The same box as create's: one description serves both.
	if c := createArgs("podman", &b, "auto"); !reflect.DeepEqual(got[3:], c[1:]) {
		t.Errorf("run's box %q differs from create's %q", got[3:], c[1:])
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
