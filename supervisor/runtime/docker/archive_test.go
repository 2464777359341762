package docker

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"deathwatch/supervisor"
)

// TestGetArchive: copy-out reads GET /containers/{name}/archive?path=P
// and hands back the engine's stream as it comes; an engine error is an
// error naming the box and the path; only Docker's engine offers it.
func TestGetArchive(t *testing.T) {
	f := newFakeAPI(t)
	sock := filepath.Join(t.TempDir(), "archive.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/archive") {
			f.ServeHTTP(w, r)
			return
		}
		asked = append(asked, r.Method+" "+strings.TrimPrefix(r.URL.Path, "/v1.41")+"?"+r.URL.RawQuery)
		if strings.Contains(r.URL.Path, "/gone/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(404)
			io.WriteString(w, `{"message":"No such container: gone"}`)
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		io.WriteString(w, "tar bytes")
	})}
	go srv.Serve(l)
	defer srv.Close()
	e := &Engine{Kind: "docker", EngineEnv: []string{"DOCKER_HOST=unix://" + sock}}
	ctx := context.Background()
	if !e.CanGetArchive(ctx) {
		t.Fatal("CanGetArchive: false with the API reached")
	}
	rc, err := e.GetArchive(ctx, &supervisor.Box{Name: "dw-1"}, "/tmp/res dir")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "tar bytes" || len(asked) != 1 || asked[0] != "GET /containers/dw-1/archive?path=%2Ftmp%2Fres+dir" {
		t.Errorf("read %q, asked %q", b, asked)
	}
	if _, err := e.GetArchive(ctx, &supervisor.Box{Name: "gone"}, "/res"); err == nil || !strings.Contains(err.Error(), "No such container") || !strings.Contains(err.Error(), "/res of box gone") {
		t.Errorf("a missing box: %v", err)
	}
	p := &Engine{Kind: "podman", EngineEnv: []string{"CONTAINER_HOST=unix://" + sock}}
	if p.CanGetArchive(ctx) {
		t.Error("CanGetArchive: true on podman (its archive is not the one the reader was proven against)")
	}
}
