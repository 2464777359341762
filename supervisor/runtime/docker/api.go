package docker

// The Engine API client: a small one on net/http (the official module
// adds several MB to the supervisor and a dependency tree the watcher's
// fence and `make cross` would have to carry, for six endpoints).
// Docker and Podman's Docker-compatible service both speak it.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/internal/firstline"
)

// apiMaxVersion is the newest API version whose request bodies this
// client builds; an older daemon gets its own version (negotiated from
// /_ping), a newer one this.
const apiMaxVersion = "1.47"

// apiClient talks to one engine endpoint.
type apiClient struct {
	ep      endpoint
	tls     *tls.Config
	version string // "1.41": the path prefix /v1.41
	server  string // _ping's Server header: "Docker/20.10.24+dfsg1 (linux)"
	libpod  string // _ping's Libpod-Api-Version header (a podman service): "4.3.1"
	hc      *http.Client
	peer    *peerCred // the unix socket's listener, as the first connection saw it
}

// peerCred is the uid of the process listening on a unix endpoint, read
// (SO_PEERCRED) from the first connection the client made to it: the
// probe needs no connection of its own to learn it.
type peerCred struct {
	mu       sync.Mutex
	seen     bool
	uid, pid int // pid 0: not in this pid namespace
	ok       bool
}

// note reads the listener's uid from conn, once.
func (p *peerCred) note(conn net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.seen {
		p.seen = true
		p.uid, p.pid, p.ok = connPeer(conn)
	}
}

// listenerUID is the uid of the process that listens on the client's
// unix socket (socketOwner), from a connection the client made when
// it made one, else from one of its own.
func (c *apiClient) listenerUID() (int, bool) {
	uid, _, ok := c.listener()
	return uid, ok
}

// listener is the uid and pid of the process that listens on the
// client's unix socket, as listenerUID reads them.
func (c *apiClient) listener() (uid, pid int, ok bool) {
	c.peer.mu.Lock()
	seen, uid, pid, ok := c.peer.seen, c.peer.uid, c.peer.pid, c.peer.ok
	c.peer.mu.Unlock()
	if seen {
		return uid, pid, ok
	}
	return socketOwner(c.ep.Addr)
}

func newAPIClient(ep endpoint) (*apiClient, error) {
	if ep.Scheme != "unix" && ep.Scheme != "tcp" {
		return nil, fmt.Errorf("%s (from %s): this client speaks unix:// and tcp:// only", ep, ep.From)
	}
	c := &apiClient{ep: ep, peer: &peerCred{}}
	if ep.TLS {
		t, err := ep.tlsConfig()
		if err != nil {
			return nil, err
		}
		c.tls = t
	}
	c.hc = &http.Client{Transport: &http.Transport{
		DialContext:         c.dial,
		TLSClientConfig:     c.tls,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}}
	return c, nil
}

func (c *apiClient) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	if c.ep.Scheme == "unix" {
		conn, err := d.DialContext(ctx, "unix", c.ep.Addr)
		if err == nil {
			c.peer.note(conn)
		}
		return conn, err
	}
	return d.DialContext(ctx, "tcp", c.ep.Addr)
}

// url builds the request URL: path is the versioned API path
// ("/containers/create"), query its parameters.
func (c *apiClient) url(path string, q url.Values) *url.URL {
	u := &url.URL{Scheme: "http", Host: "docker", Path: path, RawQuery: q.Encode()}
	if c.ep.Scheme == "tcp" {
		u.Host = c.ep.Addr
		if c.tls != nil {
			u.Scheme = "https"
		}
	}
	if c.version != "" && path != "/_ping" {
		u.Path = "/v" + c.version + path
	}
	return u
}

// apiError is a non-2xx answer: the status and the engine's message.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("engine answered HTTP %d", e.Status)
}

// statusOf is the HTTP status of an API error (0: none, or not one).
func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// do sends one request with a JSON body (nil: none) and decodes a JSON
// answer into out (nil: discarded).
func (c *apiClient) do(ctx context.Context, method, path string, q url.Values, body, out any) (http.Header, error) {
	return c.send(ctx, method, path, q, body, out, nil)
}

// doStarted sends a bodiless request and closes ready once the engine's
// answer has begun (its headers arrived), before the body.
func (c *apiClient) doStarted(ctx context.Context, method, path string, q url.Values, out any, ready chan struct{}) (http.Header, error) {
	return c.send(ctx, method, path, q, nil, out, ready)
}

func (c *apiClient) send(ctx context.Context, method, path string, q url.Values, body, out any, ready chan struct{}) (http.Header, error) {
	if ready != nil {
		defer func() {
			select {
			case <-ready:
			default:
				close(ready)
			}
		}()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q).String(), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if ready != nil {
		close(ready)
	}
	if resp.StatusCode/100 != 2 {
		return resp.Header, readAPIError(resp)
	}
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return resp.Header, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.Header, fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return resp.Header, nil
}

func readAPIError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var m struct{ Message string }
	if json.Unmarshal(b, &m) != nil || m.Message == "" {
		m.Message = firstline.Of(string(b))
	}
	return &apiError{Status: resp.StatusCode, Message: m.Message}
}

// negotiate pings the engine and settles the API version: the
// engine's own when it is older than apiMaxVersion.
func (c *apiClient) negotiate(ctx context.Context) error {
	h, err := c.do(ctx, http.MethodGet, "/_ping", nil, nil, nil)
	if err != nil {
		return err
	}
	c.version, c.server, c.libpod = apiMaxVersion, h.Get("Server"), h.Get("Libpod-Api-Version")
	if v := h.Get("Api-Version"); v != "" && versionLess(v, apiMaxVersion) {
		c.version = v
	}
	return nil
}

// versionLess compares two "major.minor" API versions.
func versionLess(a, b string) bool {
	pa, pb := strings.SplitN(a, ".", 2), strings.SplitN(b, ".", 2)
	for i := 0; i < 2; i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// ---- pure request builders ----

// apiCreate is the body of POST /containers/create.
type apiCreate struct {
	Image        string
	Entrypoint   []string
	Cmd          []string
	Env          []string
	Labels       map[string]string
	WorkingDir   string `json:",omitempty"`
	AttachStdin  bool
	AttachStdout bool
	AttachStderr bool
	OpenStdin    bool
	StdinOnce    bool
	Tty          bool
	HostConfig   apiHostConfig
}

type apiHostConfig struct {
	Binds         []string   `json:",omitempty"` // podman's (bindSpec adds its options)
	Mounts        []apiMount `json:",omitempty"` // docker's
	NetworkMode   string
	AutoRemove    bool
	CapDrop       []string
	CapAdd        []string
	SecurityOpt   []string
	Init          *bool
	LogConfig     apiLogConfig
	RestartPolicy apiRestart
	PidsLimit     *int64 `json:",omitempty"`
	Memory        int64  `json:",omitempty"`
	MemorySwap    int64  `json:",omitempty"`
	UsernsMode    string `json:",omitempty"`
	// The box's writable places: a read-only root (unless
	// --read-write-root), /tmp and /dev/shm bounded tmpfs.
	ReadonlyRootfs bool              `json:",omitempty"`
	Tmpfs          map[string]string `json:",omitempty"`
	ShmSize        int64             `json:",omitempty"`
}

// apiMount is one bind mount. Unlike HostConfig.Binds, the engine
// fails the create when Source is missing instead of making an empty
// folder there.
type apiMount struct {
	Type     string // "bind"
	Source   string
	Target   string
	ReadOnly bool `json:",omitempty"`
}

// bindMount is a bind mount of source at target.
func bindMount(source, target string, readOnly bool) apiMount {
	return apiMount{Type: "bind", Source: source, Target: target, ReadOnly: readOnly}
}

// bind adds a bind mount of source at target: docker's through Mounts
// (a missing source fails the create), podman's as a Binds entry
// SRC:DST[:ro], which bindSpec makes nosuid and nodev.
func (h *apiHostConfig) bind(kind, source, target string, readOnly bool) {
	if kind != "podman" {
		h.Mounts = append(h.Mounts, bindMount(source, target, readOnly))
		return
	}
	v := source + ":" + target
	if readOnly {
		v += ":ro"
	}
	h.Binds = append(h.Binds, v)
}

type apiLogConfig struct{ Type string }
type apiRestart struct{ Name string }

// boxConf is what a box's create request takes from the engine rather
// than the box: the user-namespace mode ("auto": a range of the box's
// own), and unbounded, set when the engine cannot enforce memory or
// pids limits (rootless on cgroup v1): then no default bound is asked
// for (an explicit one is refused before, CheckLimits).
type boxConf struct {
	kind      string // "podman", else docker
	userns    string
	unbounded bool
	liveDir   string // the box's live FIFO's host folder, "" for none
	// livePipe: the box's PID 1 gets its live pipe's read end as
	// descriptor liveFDInBox (a one-step run's, runArgs).
	livePipe bool
}

// tmpOptions are the box's /tmp tmpfs options, the native runtime's
// bounds. exec is spelled out: Docker adds noexec to a tmpfs that does
// not say, and /tmp is where a read-only root's box keeps what it runs
// (a copy-in's scripts, a build's binaries). Podman refuses nr_inodes
// (an unknown mount option to it): its boxes' /tmp is bounded in bytes
// alone.
func tmpOptions(kind string) string {
	o := fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", supervisor.TmpfsBytes)
	if kind != "podman" {
		o += fmt.Sprintf(",nr_inodes=%d", supervisor.TmpfsInodes)
	}
	return o
}

// createBody describes the box as an API request (createArgs spells the
// same as CLI flags). Swap equal to memory: the limit is the limit.
// StdinOnce: the engine closes the box's stdin when our attach
// ends (the supervisor died, or let go): the watcher's EOF. Unless the
// box asks for its own, it gets the default pids and memory bounds
// where the engine enforces them; the root is read-only and /tmp a
// bounded tmpfs unless ReadWriteRoot (the engine's writable layer is
// bounded by nothing but the host's disk). A box with ids of its own (OwnIDs) has the watcher
// drop to its watcher ids (ids are not secret; the agent's travel in
// the spec).
func createBody(b *supervisor.Box, conf boxConf) apiCreate {
	no := false
	c := apiCreate{
		Image: b.Image, Cmd: []string{"--control=stdin"}, Env: slices.Clone(supervisor.WatcherEnv),
		Labels:      map[string]string{},
		WorkingDir:  b.Workdir,
		AttachStdin: true, AttachStdout: true, AttachStderr: true, OpenStdin: true, StdinOnce: true,
		HostConfig: apiHostConfig{
			NetworkMode: b.Network, AutoRemove: true,
			CapDrop: []string{"ALL"}, CapAdd: append([]string(nil), watcherCaps...),
			SecurityOpt: []string{"no-new-privileges"}, Init: &no,
			LogConfig: apiLogConfig{Type: "none"}, RestartPolicy: apiRestart{Name: "no"},
			UsernsMode:     conf.userns,
			ReadonlyRootfs: !b.ReadWriteRoot,
			ShmSize:        supervisor.ShmBytes,
		},
	}
	if !b.ReadWriteRoot {
		// With a writable root, /tmp is the layer's, as the user asked
		// (and the engine's archive endpoint, blind to the box's tmpfs
		// mounts, reaches it).
		c.HostConfig.Tmpfs = map[string]string{"/tmp": tmpOptions(conf.kind)}
	}
	if conf.livePipe {
		c.Cmd = append(c.Cmd, fmt.Sprintf("--live-fd=%d", liveFDInBox))
	}
	if ids := b.OwnIDs; ids != nil {
		c.Cmd = append(c.Cmd, fmt.Sprintf("--watcher-user=%d:%d", ids.WatcherUID, ids.WatcherGID))
	}
	for k, v := range b.Labels {
		c.Labels[k] = v
	}
	if c.HostConfig.NetworkMode == "" {
		c.HostConfig.NetworkMode = "none"
	}
	pids, mem := b.PidsLimit, b.Memory
	if !conf.unbounded {
		if pids == 0 {
			pids = supervisor.DefaultPidsLimit
		}
		if mem == 0 {
			mem = supervisor.DefaultMemory
		}
	}
	if pids > 0 {
		c.HostConfig.PidsLimit = &pids
	}
	if mem > 0 {
		c.HostConfig.Memory, c.HostConfig.MemorySwap = mem, mem
	}
	for _, m := range b.Mounts {
		c.HostConfig.bind(conf.kind, m.Source, m.Target, m.ReadOnly)
	}
	entry := b.WatcherInImage
	if entry == "" {
		entry = supervisor.WatcherMountPoint
		c.HostConfig.bind(conf.kind, b.WatcherPath, supervisor.WatcherMountPoint, true)
	}
	if conf.liveDir != "" {
		// The live FIFO's folder (livefifo_fifo.go).
		c.HostConfig.bind(conf.kind, conf.liveDir, LiveDirInBox, true)
	}
	c.Entrypoint = []string{entry}
	return c
}

// listQuery asks GET /containers/json for every box, running or not,
// that carries the instance label.
func listQuery(instance string) url.Values {
	f, _ := json.Marshal(map[string][]string{"label": {shared.LabelInstance + "=" + instance}})
	return url.Values{"all": {"1"}, "filters": {string(f)}}
}

// namedQuery lists every box, running or not, whose name contains name.
func namedQuery(name string) url.Values {
	f, _ := json.Marshal(map[string][]string{"name": {name}})
	return url.Values{"all": {"1"}, "filters": {string(f)}}
}

// attachQuery attaches to the init's stdin, stdout and stderr, from now on.
func attachQuery() url.Values {
	return url.Values{"stream": {"1"}, "stdin": {"1"}, "stdout": {"1"}, "stderr": {"1"}}
}

// ---- the runtime over the API ----

func containerPath(name, tail string) string { return "/containers/" + name + tail }

// apiProbe reads the engine's version and security options.
//
// On exec's path (the engine has a Stderr for the rootful statement) a
// docker whose local socket's listener is root (SO_PEERCRED) is rootful
// without asking: the verdict that decides before the box is created
// (--allow-rootful, the limits check) is known, and _ping's headers gave
// the version. /info, which dockerd answers slowly, then runs beside the
// journal and the create and says whether the daemon remaps user ids;
// the statement is said once the box started or at Remove (which waits
// for /info), never for a launch refused before anything was created.
// doctor (no Stderr: it reads Detail), a tcp:// daemon and a listener
// that is not root (rootless docker, a proxy) ask /info first.
func (e *Engine) apiProbe(ctx context.Context, c *apiClient) (supervisor.Info, error) {
	if e.Kind == "podman" {
		return e.libpodProbe(ctx, c)
	}
	if v := dockerServerVersion(c.server); v != "" && e.Stderr != nil && c.ep.Scheme == "unix" {
		if uid, ok := c.listenerUID(); ok && uid == 0 {
			e.rootless = false
			said := make(chan struct{})
			e.mu.Lock()
			e.stated = said
			e.mu.Unlock()
			state := func(info supervisor.Info) {
				if info.Rootless {
					return
				}
				e.mu.Lock()
				e.statement = info
				e.mu.Unlock()
			}
			go func() {
				defer close(said)
				ictx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				info, err := e.dockerInfo(ictx, c)
				if err != nil {
					e.log().Debug("engine info", "err", err)
					return
				}
				state(info)
			}()
			return supervisor.Info{Runtime: e.Kind, Present: true, Version: v}, nil
		}
	}
	info, err := e.dockerInfo(ctx, c)
	e.rootless, e.hostIDs = info.Rootless, info.Detail == rootfulNoUserns
	if err == nil {
		e.settleDaemonIDs(c, &info)
	}
	return info, err
}

// dockerServerVersion is the daemon's version in _ping's Server header
// ("Docker/20.10.24+dfsg1 (linux)"), "" when it names none.
func dockerServerVersion(server string) string {
	v, ok := strings.CutPrefix(server, "Docker/")
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}

// statedBy waits, up to d, for the /info answer that apiProbe left the
// rootful statement to, says the statement once it came (nothing for a
// remapping daemon), and returns how long it waited.
func (e *Engine) statedBy(d time.Duration) (waited time.Duration) {
	e.mu.Lock()
	said := e.stated
	e.mu.Unlock()
	if said == nil {
		return 0
	}
	t0 := time.Now()
	select {
	case <-said:
	default:
		select {
		case <-said:
			waited = time.Since(t0)
		case <-time.After(d):
			return time.Since(t0)
		}
	}
	e.mu.Lock()
	info := e.statement
	e.mu.Unlock()
	e.warnShared(info)
	return waited
}

// dockerInfo reads docker's /info: the version, and whether the daemon
// is rootless or remaps user ids.
func (e *Engine) dockerInfo(ctx context.Context, c *apiClient) (supervisor.Info, error) {
	info := supervisor.Info{Runtime: e.Kind}
	var r struct {
		ServerVersion   string
		SecurityOptions []string
		daemonLimits
	}
	if _, err := c.do(ctx, http.MethodGet, "/info", nil, nil, &r); err != nil {
		info.Detail = fmt.Sprintf("%s engine at %s is not usable: %v", e.Kind, c.ep, err)
		return info, exitcode.Engine("%s", info.Detail)
	}
	var userns bool
	for _, o := range r.SecurityOptions {
		switch name, _, _ := strings.Cut(o, ","); name {
		case "name=rootless":
			info.Rootless = true
		case "name=userns":
			userns = true
		}
	}
	if e.Kind == "docker" {
		e.mu.Lock()
		e.limits, e.remaps = &r.daemonLimits, userns
		e.mu.Unlock()
	}
	info.Present, info.Version = true, r.ServerVersion
	if e.Kind == "docker" && !info.Rootless && !userns {
		info.Detail = rootfulNoUserns
	}
	return info, nil
}

// rootfulNoUserns says what a rootful docker without userns-remap means.
const rootfulNoUserns = "rootful docker without userns-remap: root in a box is root on the host's ids if a wall falls; set \"userns-remap\" in daemon.json, or use rootless docker or podman"

func (e *Engine) apiCheckImage(ctx context.Context, c *apiClient, image string) error {
	_, err := c.do(ctx, http.MethodGet, "/images/"+image+"/json", nil, nil, nil)
	switch {
	case err == nil:
		return nil
	case statusOf(err) == http.StatusNotFound:
		return exitcode.Image("image %s not found in %s; build or load it first (deathwatch never pulls)", image, e.Kind)
	default:
		return exitcode.Engine("inspect image %s: %w", image, err)
	}
}

func (e *Engine) apiCreate(ctx context.Context, c *apiClient, b *supervisor.Box) error {
	conf := e.boxConf()
	conf.liveDir = e.liveDir(b.Name)
	body := createBody(b, conf)
	for i, v := range body.HostConfig.Binds {
		body.HostConfig.Binds[i] = bindSpec(e.Kind, v)
	}
	var reply struct{ Warnings []string }
	_, err := c.do(ctx, http.MethodPost, "/containers/create", url.Values{"name": {b.Name}}, body, &reply)
	switch {
	case err == nil:
		var pids int64
		if p := body.HostConfig.PidsLimit; p != nil {
			pids = *p
		}
		if rerr := limitWarning(e.Kind, body.HostConfig.Memory, pids, reply.Warnings); rerr != nil {
			// The engine made the box without a limit it was asked for:
			// it goes before anything runs in it.
			if derr := e.apiRemove(ctx, c, b); derr != nil {
				return fmt.Errorf("%w (and removing the box failed: %w)", rerr, derr)
			}
			return rerr
		}
		for _, w := range reply.Warnings {
			e.log().Warn("engine create", "box", b.Name, "warning", w)
		}
		if lerr := e.giveLive(ctx, c, b); lerr != nil {
			// The watcher would fail closed on a FIFO it cannot open: the
			// box goes before it starts.
			if derr := e.apiRemove(ctx, c, b); derr != nil {
				return fmt.Errorf("%w (and removing the box failed: %w)", lerr, derr)
			}
			return lerr
		}
		return nil
	case statusOf(err) == http.StatusNotFound: // the image went away since the check
		return exitcode.Image("create box %s: %w", b.Name, err)
	default:
		return exitcode.Setup("create box %s: %w", b.Name, err)
	}
}

// apiStart attaches to the box's init before starting it (nothing the
// watcher writes is lost), then starts it. The attach is a hijacked
// connection that carries the control stream: Close half-closes it
// (the engine closes the box's stdin: the watcher sees EOF), Kill drops
// it whole.
//
// The removal wait is asked for beside the attach (each on a connection
// of its own, neither creates anything): both must be in place before
// the start, and the engine answers them in one round trip's time
// instead of two.
func (e *Engine) apiStart(ctx context.Context, c *apiClient, b *supervisor.Box) (*supervisor.Started, error) {
	registered := e.watchRemoval(c, b.Name)
	conn, br, err := c.hijack(ctx, containerPath(b.Name, "/attach"), attachQuery())
	if err != nil {
		e.removedBy(b.Name, 0) // a box that never ran is not auto-removed: Remove deletes it
		return nil, exitcode.Setup("attach to box %s: %w", b.Name, err)
	}
	// The wait must be registered before the box can start (and end).
	select {
	case <-registered:
	case <-time.After(2 * time.Second):
	}
	if _, err := c.do(ctx, http.MethodPost, containerPath(b.Name, "/start"), nil, nil, nil); err != nil && statusOf(err) != http.StatusNotModified {
		conn.Close()
		e.removedBy(b.Name, 0) // a box that never ran is not auto-removed: Remove deletes it
		return nil, exitcode.Setup("start box %s: %w", b.Name, err)
	}
	e.statedBy(0) // the rootful statement, if /info answered already
	stderr := e.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	a := newAttached(conn, br, stderr)
	return &supervisor.Started{Control: a, Wait: a.wait, Kill: a.kill}, nil
}

// apiRemove removes the box at once; a box the engine no longer has is
// not an error. The engine's own auto-remove may be half-way (409,
// "removal already in progress"): then wait until it is gone.
func (e *Engine) apiRemove(ctx context.Context, c *apiClient, b *supervisor.Box) error {
	if waited := e.statedBy(2 * time.Second); waited > 0 {
		e.log().Debug("waited for the rootful statement", "box", b.Name, "took", waited)
	}
	if e.removedBy(b.Name, 2*time.Second) {
		return nil
	}
	q := url.Values{"force": {"1"}}
	if e.Kind == "podman" {
		q.Set("t", "0") // podman's compat API honours a stop timeout here
	}
	rm := func() error {
		_, err := c.do(ctx, http.MethodDelete, containerPath(b.Name, ""), q, nil, nil)
		if statusOf(err) == http.StatusNotFound {
			return nil
		}
		return err
	}
	return removeRacing(ctx, b.Name, rm, func() (bool, error) { return e.apiExists(ctx, c, b) })
}

// inspected is the part of GET /containers/{name}/json we read.
type inspected struct {
	Name  string
	State struct{ Pid int }
}

func (e *Engine) apiInspect(ctx context.Context, c *apiClient, b *supervisor.Box) (*inspected, error) {
	var r inspected
	_, err := c.do(ctx, http.MethodGet, containerPath(b.Name, "/json"), nil, nil, &r)
	if statusOf(err) == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The engine also answers for an id prefix: only the exact name counts.
	if strings.TrimPrefix(r.Name, "/") != b.Name {
		return nil, nil
	}
	return &r, nil
}

// apiExists reads the engine's listing, as List (and so reconcile) does:
// during the engine's own removal the box leaves its name index before
// its listing, and an inspect would call gone a box reconcile still
// finds. The name filter matches substrings: only the exact name counts.
func (e *Engine) apiExists(ctx context.Context, c *apiClient, b *supervisor.Box) (bool, error) {
	var rows []struct{ Names []string }
	if _, err := c.do(ctx, http.MethodGet, "/containers/json", namedQuery(b.Name), nil, &rows); err != nil {
		return false, fmt.Errorf("look for box %s: %w", b.Name, err)
	}
	for _, r := range rows {
		for _, n := range r.Names {
			if strings.TrimPrefix(n, "/") == b.Name {
				return true, nil
			}
		}
	}
	return false, nil
}

func (e *Engine) apiHostPID(ctx context.Context, c *apiClient, b *supervisor.Box) (int, error) {
	r, err := e.apiInspect(ctx, c, b)
	if err != nil {
		return 0, fmt.Errorf("find the PID 1 of box %s: %w", b.Name, err)
	}
	if r == nil {
		return 0, nil
	}
	return r.State.Pid, nil
}

func (e *Engine) apiList(ctx context.Context, c *apiClient, instance string) ([]supervisor.Listed, error) {
	var rows []struct {
		Names  []string
		Labels map[string]string
		State  string
	}
	if _, err := c.do(ctx, http.MethodGet, "/containers/json", listQuery(instance), nil, &rows); err != nil {
		return nil, fmt.Errorf("list %s boxes: %w", e.Kind, err)
	}
	var ls []supervisor.Listed
	for _, r := range rows {
		// A box's own name, not a link's alias (/other/alias).
		name := ""
		for _, n := range r.Names {
			if n = strings.TrimPrefix(n, "/"); !strings.Contains(n, "/") {
				name = n
				break
			}
		}
		ls = append(ls, supervisor.Listed{Name: name, Labels: r.Labels, Running: r.State == "running"})
	}
	return ls, nil
}

// userns is the user-namespace mode a box is created with: "auto" (a
// range of its own) on a podman that has the ids for it, else the
// engine's default (docker: userns-remap where the daemon has it).
func (e *Engine) userns() string {
	if e.usernsAuto {
		// 65536 ids: the watcher drops itself to uid 65533.
		return "auto:size=65536"
	}
	return ""
}

// podmanNoSubids says what a rootful podman without ids for
// --userns=auto means.
const podmanNoSubids = "rootful podman without subordinate ids for user \"containers\": boxes run with the host's root ids; add a containers range to /etc/subuid and /etc/subgid (e.g. containers:1073741824:268435456) so each box gets --userns=auto, or use rootless podman"

// sameIDs is what a statement of a rootless engine whose boxes share
// ids says (warnShared says it on exec's stderr).
const sameIDs = "every box of this user runs on the same ids (one box's agent can signal another's)"

// podmanRootlessShared says what a rootless podman whose user has
// subordinate ids for one box only means.
const podmanRootlessShared = "rootless podman: this user's subordinate ids in /etc/subuid and /etc/subgid hold one box's 65536, so " + sameIDs + "; give the user at least 131072 (e.g. USER:100000:1048576) so each box gets --userns=auto"

// dockerRootlessShared says what a rootless docker whose boxes cannot
// take ids of their own means: why not, and what to do.
func dockerRootlessShared(why, todo string) string {
	return "rootless docker: " + why + ", so " + sameIDs + "; " + todo
}

// podmanIDs settles a podman's user namespace: --userns=auto when the
// host has the subordinate ids for more than one box (rootful: user
// "containers"'s, where podman takes each box's range from; rootless:
// the user's own), else the statement in info.Detail. A rootful podman
// without them runs boxes on the host's ids: each takes ids of its own
// (hostIDs).
func (e *Engine) podmanIDs(info *supervisor.Info) {
	if e.Kind != "podman" || !info.Present {
		return
	}
	u, _ := os.ReadFile("/etc/subuid")
	g, _ := os.ReadFile("/etc/subgid")
	if info.Rootless {
		// A remote rootless service's user is not this one: its ids are unknown.
		if e.podmanRemote() {
			return
		}
		me := currentUser()
		e.usernsAuto = hasSubIDs(string(u), me, 2*65536) && hasSubIDs(string(g), me, 2*65536)
		if !e.usernsAuto && info.Detail == "" {
			info.Detail = podmanRootlessShared
		}
		return
	}
	e.usernsAuto = hasSubIDs(string(u), []string{"containers"}, 65536) && hasSubIDs(string(g), []string{"containers"}, 65536)
	e.hostIDs = !e.usernsAuto
	if !e.usernsAuto && info.Detail == "" {
		info.Detail = podmanNoSubids
	}
}

// currentUser names this process's user as /etc/subuid may: by name
// and by uid.
func currentUser() []string {
	names := []string{strconv.Itoa(os.Geteuid())}
	if u, err := user.Current(); err == nil {
		names = append(names, u.Username)
	}
	return names
}

// hasSubIDs reports whether an /etc/subuid-style file gives one of
// the names of a user a range of at least n ids.
func hasSubIDs(file string, user []string, n uint64) bool {
	for _, l := range strings.Split(file, "\n") {
		f := strings.Split(strings.TrimSpace(l), ":")
		if len(f) == 3 && slices.Contains(user, f[0]) {
			if c, err := strconv.ParseUint(f[2], 10, 64); err == nil && c >= n {
				return true
			}
		}
	}
	return false
}

// watchRemoval asks docker, before the box starts, to answer once the
// box is removed (as `docker run --rm` does): the engine's auto-remove
// after the watcher exits is then known at once, without a DELETE that
// races it (409) and polls. Podman's compatible API is not trusted with
// this condition: Remove asks it directly. The channel it returns is
// closed once the engine took the wait (at once for podman).
func (e *Engine) watchRemoval(c *apiClient, name string) <-chan struct{} {
	ready := make(chan struct{})
	if e.Kind != "docker" {
		close(ready)
		return ready
	}
	done := make(chan error, 1)
	e.mu.Lock()
	if e.removed == nil {
		e.removed = map[string]chan error{}
	}
	e.removed[name] = done
	e.mu.Unlock()
	go func() {
		var r struct {
			StatusCode int
			Error      *struct{ Message string }
		}
		// No deadline: the box may live for hours; the process ends it.
		_, err := c.doStarted(context.Background(), http.MethodPost, containerPath(name, "/wait"), url.Values{"condition": {"removed"}}, &r, ready)
		if err == nil && r.Error != nil && r.Error.Message != "" {
			// The engine wakes removal waiters when its auto-remove
			// failed too, with the failure here: the box is still
			// there (dead), and Remove must delete it.
			err = fmt.Errorf("the engine's own removal of box %s failed: %s", name, r.Error.Message)
		}
		done <- err
	}()
	return ready
}

// removedBy reports whether the engine said the box was removed, waiting
// up to d for it. An answer that carries an error is not a removal.
func (e *Engine) removedBy(name string, d time.Duration) bool {
	e.mu.Lock()
	done := e.removed[name]
	delete(e.removed, name)
	e.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case err := <-done:
		if err != nil {
			e.log().Debug("no removal by the engine", "box", name, "why", err)
		}
		return err == nil
	case <-time.After(d):
		return false
	}
}
