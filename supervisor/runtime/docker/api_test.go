//go:build linux || darwin

package docker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// Every request body comes from a pure builder: each option of the CLI's
// createArgs has its field here.
func TestCreateBody(t *testing.T) {
	no := false
	base := supervisor.Box{
		Name: "dw-1", Image: "img", WatcherPath: "/opt/dw/watcher",
		Labels: map[string]string{"io.deathwatch.nonce": "n", "team": "a,b"},
	}
	defPids := int64(4096)
	head := func() apiCreate {
		return apiCreate{
			Image: "img", Entrypoint: []string{"/dw/watcher"}, Cmd: []string{"--control=stdin"}, Env: []string{"GOMAXPROCS=1", "GODEBUG=profstackdepth=0"},
			Labels:      map[string]string{"io.deathwatch.nonce": "n", "team": "a,b"},
			AttachStdin: true, AttachStdout: true, AttachStderr: true, OpenStdin: true, StdinOnce: true,
			HostConfig: apiHostConfig{
				// Docker's binds go through Mounts (a missing source fails).
				Mounts:      []apiMount{{Type: "bind", Source: "/opt/dw/watcher", Target: "/dw/watcher", ReadOnly: true}},
				NetworkMode: "none", AutoRemove: true,
				// The caps, one by one, are TestCreateArgs' (createArgs spells this body).
				CapDrop: []string{"ALL"}, CapAdd: watcherCaps,
				SecurityOpt: []string{"no-new-privileges"}, Init: &no,
				LogConfig: apiLogConfig{Type: "none"}, RestartPolicy: apiRestart{Name: "no"},
				// Bounded by default: 4096 processes, 4 GiB without swap,
				// a read-only root, /tmp 1 GiB and /dev/shm 256 MiB.
				PidsLimit: &defPids, Memory: 4 << 30, MemorySwap: 4 << 30,
				ReadonlyRootfs: true, Tmpfs: map[string]string{"/tmp": "rw,exec,nosuid,nodev,size=1073741824,mode=1777,nr_inodes=262144"}, ShmSize: 256 << 20,
			},
		}
	}
	pids := int64(64)
	for _, tc := range []struct {
		name string
		mod  func(*supervisor.Box)
		conf boxConf
		want func(*apiCreate)
	}{
		{"minimal: network none, bind-mounted watcher", func(*supervisor.Box) {}, boxConf{}, func(*apiCreate) {}},
		{"an engine that cannot enforce limits: no default bound", func(*supervisor.Box) {}, boxConf{unbounded: true}, func(c *apiCreate) {
			c.HostConfig.PidsLimit, c.HostConfig.Memory, c.HostConfig.MemorySwap = nil, 0, 0
		}},
		{"--read-write-root: /tmp is the layer's", func(b *supervisor.Box) { b.ReadWriteRoot = true }, boxConf{}, func(c *apiCreate) {
			c.HostConfig.ReadonlyRootfs, c.HostConfig.Tmpfs = false, nil
		}},
		{"ids of the box's own: the watcher's on its command line", func(b *supervisor.Box) {
			b.OwnIDs = &supervisor.OwnIDs{AgentUID: 1 << 31, AgentGID: 1 << 31, WatcherUID: 1<<31 + 1, WatcherGID: 1<<31 + 1}
		}, boxConf{}, func(c *apiCreate) { c.Cmd = append(c.Cmd, "--watcher-user=2147483649:2147483649") }},
		{"limits, workdir, mounts", func(b *supervisor.Box) {
			b.Network, b.PidsLimit, b.Memory, b.Workdir = "bridge", 64, 512<<20, "/work"
			b.Mounts = []supervisor.Mount{{Source: "/src", Target: "/dst", ReadOnly: true}, {Source: "/a", Target: "/b"}}
		}, boxConf{}, func(c *apiCreate) {
			c.HostConfig.NetworkMode, c.HostConfig.PidsLimit = "bridge", &pids
			// Swap equal to memory: the limit is the limit.
			c.HostConfig.Memory, c.HostConfig.MemorySwap = 512<<20, 512<<20
			c.WorkingDir = "/work"
			c.HostConfig.Mounts = []apiMount{{Type: "bind", Source: "/src", Target: "/dst", ReadOnly: true}, {Type: "bind", Source: "/a", Target: "/b"},
				{Type: "bind", Source: "/opt/dw/watcher", Target: "/dw/watcher", ReadOnly: true}}
		}},
		{"watcher in image: no bind mount", func(b *supervisor.Box) { b.WatcherInImage = "/usr/local/bin/watcher" }, boxConf{},
			func(c *apiCreate) { c.Entrypoint, c.HostConfig.Mounts = []string{"/usr/local/bin/watcher"}, nil }},
		{"podman: user namespace, no inode count (podman refuses nr_inodes)", func(*supervisor.Box) {}, boxConf{kind: "podman", userns: "auto"}, func(c *apiCreate) {
			c.HostConfig.UsernsMode = "auto"
			c.HostConfig.Tmpfs["/tmp"] = "rw,exec,nosuid,nodev,size=1073741824,mode=1777"
			// Podman's binds stay Binds entries (bindSpec adds nosuid,nodev).
			c.HostConfig.Mounts, c.HostConfig.Binds = nil, []string{"/opt/dw/watcher:/dw/watcher:ro"}
		}},
		{"live FIFO: its folder read-only at /dev/.deathwatch", func(*supervisor.Box) {}, boxConf{liveDir: "/run/deathwatch/live/dw-1"},
			func(c *apiCreate) {
				c.HostConfig.Mounts = append(c.HostConfig.Mounts, apiMount{Type: "bind", Source: "/run/deathwatch/live/dw-1", Target: "/dev/.deathwatch", ReadOnly: true})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := base
			tc.mod(&b)
			want := head()
			tc.want(&want)
			if got := createBody(&b, tc.conf); !reflect.DeepEqual(got, want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				t.Errorf("\n got %s\nwant %s", g, w)
			}
		})
	}
	// The JSON says no engine init (the watcher is PID 1) in so many words.
	j, _ := json.Marshal(createBody(&base, boxConf{}))
	for _, s := range []string{`"Init":false`, `"StdinOnce":true`, `"Tty":false`, `"AutoRemove":true`, `"ReadonlyRootfs":true`, `"PidsLimit":4096`} {
		if !bytes.Contains(j, []byte(s)) {
			t.Errorf("create body lacks %s: %s", s, j)
		}
	}
	j, _ = json.Marshal(createBody(&base, boxConf{unbounded: true}))
	if strings.Contains(string(j), "PidsLimit") || strings.Contains(string(j), "UsernsMode") {
		t.Errorf("unset limits must be absent: %s", j)
	}
}

func TestQueries(t *testing.T) {
	if got := listQuery("ci").Encode(); got != "all=1&filters=%7B%22label%22%3A%5B%22io.deathwatch.instance%3Dci%22%5D%7D" {
		t.Errorf("listQuery: %s", got)
	}
	if got := namedQuery("dw-1").Encode(); got != "all=1&filters=%7B%22name%22%3A%5B%22dw-1%22%5D%7D" {
		t.Errorf("namedQuery: %s", got)
	}
	if got := attachQuery().Encode(); got != "stderr=1&stdin=1&stdout=1&stream=1" {
		t.Errorf("attachQuery: %s", got)
	}
	for _, tc := range []struct {
		a, b string
		less bool
	}{{"1.41", "1.47", true}, {"1.47", "1.47", false}, {"1.50", "1.47", false}, {"1.9", "1.10", true}, {"2.0", "1.47", false}} {
		if versionLess(tc.a, tc.b) != tc.less {
			t.Errorf("versionLess(%s, %s) != %v", tc.a, tc.b, tc.less)
		}
	}
}

func TestDockerEndpoint(t *testing.T) {
	home := t.TempDir()
	// A docker context as `docker context create` stores it.
	ctxMeta := func(name, host string) {
		sum := sha256.Sum256([]byte(name))
		d := filepath.Join(home, ".docker", "contexts", "meta", hex.EncodeToString(sum[:]))
		os.MkdirAll(d, 0o700)
		os.WriteFile(filepath.Join(d, "meta.json"), []byte(`{"Name":"`+name+`","Endpoints":{"docker":{"Host":"`+host+`","SkipTLSVerify":false}}}`), 0o600)
	}
	ctxMeta("remote", "ssh://ci@build")
	ctxMeta("tcp", "tcp://10.0.0.2:2376")
	sum := sha256.Sum256([]byte("tcp"))
	os.MkdirAll(filepath.Join(home, ".docker", "contexts", "tls", hex.EncodeToString(sum[:]), "docker"), 0o700)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want endpoint
		err  bool
	}{
		{"default", map[string]string{"HOME": home}, endpoint{Scheme: "unix", Addr: "/var/run/docker.sock", From: "default"}, false},
		{"DOCKER_HOST unix", map[string]string{"DOCKER_HOST": "unix:///run/user/1000/docker.sock"}, endpoint{Scheme: "unix", Addr: "/run/user/1000/docker.sock", From: "DOCKER_HOST"}, false},
		{"DOCKER_HOST tcp", map[string]string{"DOCKER_HOST": "tcp://h:2375"}, endpoint{Scheme: "tcp", Addr: "h:2375", From: "DOCKER_HOST"}, false},
		{"DOCKER_HOST tcp TLS", map[string]string{"DOCKER_HOST": "tcp://h:2376", "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": "/certs"},
			endpoint{Scheme: "tcp", Addr: "h:2376", TLS: true, CertDir: "/certs", From: "DOCKER_HOST"}, false},
		{"DOCKER_HOST ssh", map[string]string{"DOCKER_HOST": "ssh://u@h"}, endpoint{Scheme: "ssh", Addr: "u@h", From: "DOCKER_HOST"}, false},
		{"DOCKER_HOST garbage", map[string]string{"DOCKER_HOST": "/var/run/docker.sock"}, endpoint{}, true},
		{"context ssh", map[string]string{"HOME": home, "DOCKER_CONTEXT": "remote"}, endpoint{Scheme: "ssh", Addr: "ci@build", From: "docker context remote"}, false},
		{"context tcp with TLS", map[string]string{"HOME": home, "DOCKER_CONTEXT": "tcp"},
			endpoint{Scheme: "tcp", Addr: "10.0.0.2:2376", TLS: true, CertDir: filepath.Join(home, ".docker", "contexts", "tls", hex.EncodeToString(sum[:]), "docker"), From: "docker context tcp"}, false},
		{"context missing", map[string]string{"HOME": home, "DOCKER_CONTEXT": "nope"}, endpoint{}, true},
		{"DOCKER_HOST wins over the context", map[string]string{"HOME": home, "DOCKER_CONTEXT": "remote", "DOCKER_HOST": "unix:///s"}, endpoint{Scheme: "unix", Addr: "/s", From: "DOCKER_HOST"}, false},
	} {
		got, err := dockerEndpoint(tc.env)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("%s: %+v %v, want %+v", tc.name, got, err, tc.want)
		}
	}
	// The current context from config.json.
	os.WriteFile(filepath.Join(home, ".docker", "config.json"), []byte(`{"currentContext":"remote"}`), 0o600)
	if got, err := dockerEndpoint(map[string]string{"HOME": home}); err != nil || got.Scheme != "ssh" {
		t.Errorf("config.json currentContext: %+v %v", got, err)
	}
	// An ssh:// endpoint is the CLI's: the API client refuses it.
	if _, err := newAPIClient(endpoint{Scheme: "ssh", Addr: "u@h"}); err == nil {
		t.Error("API client accepted ssh://")
	}
	if _, ok := podmanEndpoint(map[string]string{"CONTAINER_HOST": "ssh://u@h/run/podman.sock"}, 0); ok {
		t.Error("podman ssh:// taken for the API")
	}
	if p, ok := podmanEndpoint(map[string]string{"CONTAINER_HOST": "unix:///x/p.sock"}, 1000); !ok || p.Addr != "/x/p.sock" {
		t.Errorf("podman CONTAINER_HOST: %+v %v", p, ok)
	}
	if _, ok := podmanEndpoint(map[string]string{"XDG_RUNTIME_DIR": t.TempDir()}, 1000); ok {
		t.Error("podman without a service socket taken for the API")
	}
}

// fakeAPI is an engine API on a unix socket: it keeps boxes in a map,
// records every request, and plays the watcher's half on attach: each
// chunk of stdin comes back as a stdout frame, a stderr frame is sent
// first, and stdin EOF ends the box (StdinOnce).
type fakeAPI struct {
	mu       sync.Mutex
	sock     string
	calls    []string
	boxes    map[string]map[string]string // name → labels
	created  apiCreate
	rootless bool
	images   map[string]bool
	// removeConflict: the first DELETE answers 409 (auto-remove in
	// progress) and the box goes away a moment later.
	removeConflict bool
	// autoRemove: the box goes away when its stdin ends (the watcher
	// exits, the engine removes it).
	autoRemove bool
	// autoRemoveFails: that removal fails (the engine could not remove
	// the box's file system): the box stays, and the removal wait
	// answers with the failure, as dockerd's SetRemovalError does.
	autoRemoveFails bool
	removalFailed   map[string]bool
	stdinEOF        chan struct{}
	// libpod: _ping answers as a podman service does (its version).
	libpod bool
	// server is _ping's Server header ("": none).
	server string
	// infoGate, when set, holds /info's answer until it is closed;
	// pingGate the same for /_ping.
	infoGate, pingGate chan struct{}
	// info: more of /info's answer (MemoryLimit, ...); warnings: the
	// create reply's Warnings.
	info     map[string]any
	warnings []string
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{sock: filepath.Join(t.TempDir(), "engine.sock"), boxes: map[string]map[string]string{}, images: map[string]bool{"img": true}, removalFailed: map[string]bool{}, stdinEOF: make(chan struct{})}
	l, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return f
}

func (f *fakeAPI) engine() *Engine {
	return &Engine{Kind: "docker", EngineEnv: []string{"DOCKER_HOST=unix://" + f.sock}}
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/wait") {
		f.serveWait(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	p := strings.TrimPrefix(r.URL.Path, "/v1.41")
	js := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	noSuch := func() { js(404, map[string]string{"message": "No such container: x"}) }
	switch {
	case p == "/_ping":
		if f.pingGate != nil {
			f.mu.Unlock()
			<-f.pingGate
			f.mu.Lock()
		}
		if f.libpod {
			w.Header().Set("Libpod-Api-Version", "4.3.1")
		}
		w.Header().Set("Api-Version", "1.41")
		if f.server != "" {
			w.Header().Set("Server", f.server)
		}
		w.Write([]byte("OK"))
	case p == "/info":
		if f.infoGate != nil {
			f.mu.Unlock()
			<-f.infoGate
			f.mu.Lock()
		}
		opts := []string{"name=seccomp,profile=default"}
		if f.rootless {
			opts = append(opts, "name=rootless")
		}
		ans := map[string]any{"ServerVersion": "20.10.24", "SecurityOptions": opts, "MemoryLimit": true, "PidsLimit": true, "CgroupDriver": "cgroupfs"}
		for k, v := range f.info {
			ans[k] = v
		}
		js(200, ans)
	case p == "/libpod/info": // a podman service: its Docker /info names no rootless option
		js(200, map[string]any{"host": map[string]any{"security": map[string]any{"rootless": f.rootless}}, "version": map[string]any{"Version": "4.3.1"}})
	case strings.HasPrefix(p, "/images/"):
		if !f.images[strings.TrimSuffix(strings.TrimPrefix(p, "/images/"), "/json")] {
			js(404, map[string]string{"message": "No such image: x"})
			return
		}
		js(200, map[string]string{"Id": "sha256:1"})
	case p == "/containers/create":
		json.NewDecoder(r.Body).Decode(&f.created)
		f.boxes[r.URL.Query().Get("name")] = f.created.Labels
		js(201, map[string]any{"Id": "c1", "Warnings": f.warnings})
	case p == "/containers/json":
		var filters map[string][]string
		json.Unmarshal([]byte(r.URL.Query().Get("filters")), &filters)
		var out []map[string]any
		for n, l := range f.boxes {
			if want := filters["name"]; len(want) > 0 && !strings.Contains(n, want[0]) {
				continue
			}
			if want := filters["label"]; len(want) > 0 {
				k, v, _ := strings.Cut(want[0], "=")
				if l[k] != v {
					continue
				}
			}
			out = append(out, map[string]any{"Names": []string{"/" + n}, "Labels": l, "State": "running"})
		}
		js(200, out)
	case strings.HasSuffix(p, "/attach"):
		if r.Header.Get("Upgrade") != "tcp" {
			js(400, map[string]string{"message": "no upgrade"})
			return
		}
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		buf.WriteString("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
		buf.Flush()
		go f.playWatcher(conn, buf.Reader)
	case strings.HasSuffix(p, "/start"):
		w.WriteHeader(204)
	case strings.HasSuffix(p, "/json") && strings.HasPrefix(p, "/containers/"):
		name := strings.TrimSuffix(strings.TrimPrefix(p, "/containers/"), "/json")
		if _, ok := f.boxes[name]; !ok {
			noSuch()
			return
		}
		js(200, map[string]any{"Name": "/" + name, "State": map[string]int{"Pid": 4242}})
	case r.Method == http.MethodDelete:
		name := strings.TrimPrefix(p, "/containers/")
		if r.URL.Query().Get("force") != "1" {
			js(400, map[string]string{"message": "not forced"})
			return
		}
		if _, ok := f.boxes[name]; !ok {
			noSuch()
			return
		}
		if f.removeConflict {
			f.removeConflict = false
			go func() {
				time.Sleep(30 * time.Millisecond)
				f.mu.Lock()
				delete(f.boxes, name)
				f.mu.Unlock()
			}()
			js(409, map[string]string{"message": "removal of container " + name + " is already in progress"})
			return
		}
		delete(f.boxes, name)
		w.WriteHeader(204)
	default:
		js(404, map[string]string{"message": "page not found"})
	}
}

// serveWait is POST /containers/{name}/wait?condition=removed: the
// headers at once, the answer when the box is gone.
func (f *fakeAPI) serveWait(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	f.mu.Unlock()
	name := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/v1.41"), "/containers/"), "/wait")
	w.WriteHeader(200)
	w.(http.Flusher).Flush()
	for {
		f.mu.Lock()
		_, there := f.boxes[name]
		failed := f.removalFailed[name]
		f.mu.Unlock()
		if failed {
			w.Write([]byte(`{"StatusCode":0,"Error":{"Message":"unable to remove filesystem: device or resource busy"}}`))
			return
		}
		if !there {
			w.Write([]byte(`{"StatusCode":0}`))
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// playWatcher answers on a hijacked attach: a stderr frame, then each
// stdin chunk back as stdout split over two frames (a reader must
// join them), until stdin's EOF.
func (f *fakeAPI) playWatcher(conn net.Conn, r *bufio.Reader) {
	defer conn.Close()
	frame := func(stream byte, p []byte) {
		h := make([]byte, 8)
		h[0] = stream
		binary.BigEndian.PutUint32(h[4:], uint32(len(p)))
		conn.Write(append(h, p...))
	}
	frame(2, []byte("watcher: log line\n"))
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			half := (n + 1) / 2
			frame(1, buf[:half])
			frame(1, buf[half:n])
		}
		if err != nil {
			close(f.stdinEOF)
			frame(1, []byte("bye"))
			f.mu.Lock()
			if f.autoRemove {
				for n := range f.boxes {
					if f.autoRemoveFails {
						f.removalFailed[n] = true
						continue
					}
					delete(f.boxes, n)
				}
			}
			f.mu.Unlock()
			return
		}
	}
}

// TestCheckImageBesidePing: docker's image check is asked while the
// ping that settles the API version is still unanswered (on the
// unversioned path), and its verdict stands once the ping answered.
func TestCheckImageBesidePing(t *testing.T) {
	f := newFakeAPI(t)
	f.pingGate = make(chan struct{})
	e := f.engine()
	ctx := context.Background()
	errs := make(chan error, 2)
	go func() { errs <- e.CheckImage(ctx, "img") }()
	go func() { errs <- e.CheckImage(ctx, "gone") }()
	asked := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		n := 0
		for _, c := range f.calls {
			if c == "GET /images/img/json" || c == "GET /images/gone/json" {
				n++
			}
		}
		return n == 2
	}
	for deadline := time.Now().Add(10 * time.Second); !asked(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the image checks waited for the ping: calls %v", f.calls)
		}
	}
	close(f.pingGate)
	var found, missing int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			found++
		case exitcode.Of(err, 0) == shared.ExitImage && strings.Contains(err.Error(), "never pulls"):
			missing++
		default:
			t.Errorf("image check: %v", err)
		}
	}
	if found != 1 || missing != 1 {
		t.Errorf("verdicts: %d found, %d missing; want 1 and 1", found, missing)
	}
	if c := e.client(ctx); c == nil || c.version != "1.41" {
		t.Errorf("the ping settled no API: %+v", c)
	}
}

func TestAPILifecycle(t *testing.T) {
	f := newFakeAPI(t)
	f.autoRemove = true
	var stderr bytes.Buffer
	e := f.engine()
	e.Stderr = &stderr
	ctx := context.Background()

	info, err := e.Probe(ctx)
	if err != nil || !info.Present || info.Version != "20.10.24" || info.Rootless {
		t.Fatalf("probe: %+v %v", info, err)
	}
	// Rootful without userns-remap: said once, on stderr, and in Detail (doctor).
	if info.Detail != rootfulNoUserns || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "userns-remap") {
		t.Errorf("rootful statement: detail %q stderr %q", info.Detail, stderr.String())
	}
	if err := e.CheckImage(ctx, "img"); err != nil {
		t.Errorf("image check: %v", err)
	}
	if err := e.CheckImage(ctx, "gone"); exitcode.Of(err, 0) != shared.ExitImage || !strings.Contains(err.Error(), "never pulls") {
		t.Errorf("missing image: %v", err)
	}
	b := &supervisor.Box{Name: "dw-1", Image: "img", WatcherPath: "/w", Labels: map[string]string{shared.LabelInstance: "ci", shared.LabelNonce: "n"}}
	if err := e.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.created, createBody(b, boxConf{})) {
		t.Errorf("create body on the wire differs from the builder's: %+v", f.created)
	}
	st, err := e.Start(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	// Arbitrary bytes both ways (frame headers, zero bytes, a large write).
	payload := append([]byte{0, 1, 2, 0xff, 0, 0, 0, 8}, bytes.Repeat([]byte("x"), 100000)...)
	go func() {
		st.Control.Write(payload)
		st.Control.Close() // half-close: the box sees EOF
	}()
	got, err := io.ReadAll(st.Control)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if want := append(append([]byte{}, payload...), "bye"...); !bytes.Equal(got, want) {
		t.Errorf("stream: got %d bytes, want %d", len(got), len(want))
	}
	select {
	case <-f.stdinEOF:
	case <-time.After(5 * time.Second):
		t.Error("Close did not reach the box as stdin EOF")
	}
	if err := st.Wait(); err != nil {
		t.Errorf("wait: %v", err)
	}
	st.Kill()
	if !strings.Contains(stderr.String(), "watcher: log line") {
		t.Errorf("the box's stderr was not relayed: %q", stderr.String())
	}
	// The engine removed the box on its own: Remove learns it from the
	// wait registered before start, without a DELETE.
	if err := e.Remove(ctx, b); err != nil {
		t.Errorf("remove after the engine's own removal: %v", err)
	}
	f.mu.Lock()
	for _, c := range f.calls {
		if strings.HasPrefix(c, "DELETE") {
			t.Errorf("a DELETE raced the engine's auto-remove: %q", f.calls)
		}
	}
	f.boxes["dw-1"] = b.Labels // a box that stays, for the rest
	f.mu.Unlock()

	if pid, err := e.HostPID(ctx, b); err != nil || pid != 4242 {
		t.Errorf("host pid: %d %v", pid, err)
	}
	ls, err := e.List(ctx, "ci")
	if err != nil || len(ls) != 1 || ls[0].Name != "dw-1" || ls[0].Labels[shared.LabelNonce] != "n" || !ls[0].Running {
		t.Errorf("list: %+v %v", ls, err)
	}
	f.mu.Lock()
	f.removeConflict = true
	f.mu.Unlock()
	if err := e.Remove(ctx, b); err != nil {
		t.Errorf("remove during the engine's own removal: %v", err)
	}
	if there, err := e.Exists(ctx, b); err != nil || there {
		t.Errorf("exists after remove: %v %v", there, err)
	}
	if err := e.Remove(ctx, b); err != nil {
		t.Errorf("remove of a gone box: %v", err)
	}
	// No CLI on the hot path: every step went to the API; the attach
	// and the removal wait are in place before the box starts.
	f.mu.Lock()
	defer f.mu.Unlock()
	at := map[string]int{}
	for i, c := range f.calls {
		if _, ok := at[c]; !ok {
			at[c] = i
		}
	}
	if s := at["POST /v1.41/containers/dw-1/start"]; s < at["POST /v1.41/containers/dw-1/attach"] || s < at["POST /v1.41/containers/dw-1/wait?condition=removed"] {
		t.Errorf("start before attach or wait: %q", f.calls)
	}
	for _, want := range []string{"GET /_ping", "GET /v1.41/info", "POST /v1.41/containers/create", "POST /v1.41/containers/dw-1/attach",
		"POST /v1.41/containers/dw-1/wait?condition=removed", "POST /v1.41/containers/dw-1/start", "DELETE /v1.41/containers/dw-1"} {
		found := false
		for _, c := range f.calls {
			found = found || c == want
		}
		if !found {
			t.Errorf("no %q in %q", want, f.calls)
		}
	}
}

// started is a box named name created and started through f's API, by
// an engine that relays the box's stderr nowhere.
func (f *fakeAPI) started(t *testing.T, name string) (*Engine, *supervisor.Box, *supervisor.Started) {
	t.Helper()
	e := f.engine()
	e.Stderr = io.Discard
	b := &supervisor.Box{Name: name, Image: "img", WatcherPath: "/w"}
	if err := e.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	st, err := e.Start(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return e, b, st
}

// TestAPIAutoRemoveFailed: the engine's own removal failed, and its
// removal wait says so: Remove does not take that for a removal, it
// deletes the box.
func TestAPIAutoRemoveFailed(t *testing.T) {
	f := newFakeAPI(t)
	f.autoRemove, f.autoRemoveFails = true, true
	e, b, st := f.started(t, "dw-3")
	ctx := context.Background()
	st.Control.Close()
	io.ReadAll(st.Control)
	st.Wait()
	st.Kill()
	if err := e.Remove(ctx, b); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if there, err := e.Exists(ctx, b); err != nil || there {
		t.Errorf("the box is still there after Remove (%v): its engine's failed removal was taken for one", err)
	}
}

// Kill drops the attach: a read in progress ends as EOF, Wait returns.
func TestAPIKill(t *testing.T) {
	f := newFakeAPI(t)
	e, b, st := f.started(t, "dw-2")
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(st.Control)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	st.Kill()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("read after kill: %v, want EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read did not end after Kill")
	}
	if err := st.Wait(); err != nil {
		t.Error(err)
	}
	// The name filter matches substrings: only the exact name counts.
	if there, err := e.Exists(ctx, &supervisor.Box{Name: "dw-"}); err != nil || there {
		t.Errorf("Exists(dw-) = %v %v with only dw-2 there", there, err)
	}
	if there, err := e.Exists(ctx, b); err != nil || !there {
		t.Errorf("Exists(dw-2) = %v %v", there, err)
	}
}

// Where the API answers nowhere the runtime falls back to the CLI, by
// probe: here a CLI that is not installed says so.
func TestAPIUnreachableFallsBackToCLI(t *testing.T) {
	dir := t.TempDir()
	e := &Engine{Kind: "docker", Bin: "deathwatch-no-such-cli", EngineEnv: []string{"DOCKER_HOST=unix://" + filepath.Join(dir, "none.sock")}}
	if e.UsesAPI(context.Background()) {
		t.Fatal("API taken for a socket that does not exist")
	}
	_, err := e.Probe(context.Background())
	if exitcode.Of(err, 0) != shared.ExitEngine || !strings.Contains(err.Error(), "not installed") {
		t.Errorf("probe: %v", err)
	}
	ssh := &Engine{Kind: "docker", Bin: filepath.Join(dir, "no-docker"), EngineEnv: []string{"DOCKER_HOST=ssh://u@h"}}
	if ssh.UsesAPI(context.Background()) {
		t.Error("API taken for ssh://")
	}
}

// A truncated frame is an error, never a short clean stream.
func TestDemuxTruncated(t *testing.T) {
	c1, c2 := net.Pipe()
	a := newAttached(c1, bufio.NewReader(c1), io.Discard)
	go func() {
		c2.Write([]byte{1, 0, 0, 0, 0, 0, 0, 10, 'a', 'b'})
		c2.Close()
	}()
	if _, err := io.ReadAll(a); err == nil {
		t.Error("truncated frame read as a clean end")
	}
}

// A root listener on the local socket is a rootful docker without
// asking /info (exec's path: the engine has a Stderr): the probe answers
// from _ping while /info is still out, and the statement about
// userns-remap is said once /info answers, before Remove returns. A
// listener that is not root (a test run by a user) asks /info first.
func TestAPIProbeFromPing(t *testing.T) {
	for _, tc := range []struct{ server, want string }{
		{"Docker/20.10.24+dfsg1 (linux)", "20.10.24+dfsg1"}, {"Docker/28.2.2", "28.2.2"}, {"Libpod/4.3.1 (linux)", ""}, {"", ""},
	} {
		if got := dockerServerVersion(tc.server); got != tc.want {
			t.Errorf("dockerServerVersion(%q) = %q, want %q", tc.server, got, tc.want)
		}
	}
	f := newFakeAPI(t)
	f.server = "Docker/20.10.24 (linux)"
	// A file: the statement is written by another goroutine.
	stderrFile, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	said := func() string { b, _ := os.ReadFile(stderrFile.Name()); return string(b) }
	e := f.engine()
	e.Stderr = stderrFile
	root := os.Geteuid() == 0
	if root {
		f.infoGate = make(chan struct{})
	}
	info, err := e.Probe(context.Background())
	if err != nil || !info.Present || info.Version != "20.10.24" || info.Rootless {
		t.Fatalf("probe: %+v %v", info, err)
	}
	if root {
		if info.Detail != "" || said() != "" {
			t.Errorf("root listener: the probe waited for /info: detail %q stderr %q", info.Detail, said())
		}
		close(f.infoGate)
		// /info answered: still nothing said until the box starts or is
		// removed (a launch refused now says only its refusal).
		<-e.stated
		if s := said(); s != "" {
			t.Errorf("the statement was said before the box started or was removed: %q", s)
		}
	}
	if err := e.Remove(context.Background(), &supervisor.Box{Name: "dw-none"}); err != nil {
		t.Fatal(err)
	}
	if s := said(); strings.Count(s, "\n") != 1 || !strings.Contains(s, "userns-remap") {
		t.Errorf("rootful statement after Remove: %q", s)
	}
	// Without a Stderr (doctor) the statement is in Detail.
	d := f.engine()
	if info, err := d.Probe(context.Background()); err != nil || info.Detail != rootfulNoUserns {
		t.Errorf("doctor's probe: %+v %v", info, err)
	}
}
