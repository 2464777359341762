package kubernetes

// A fake API server at the client seam: the pods' REST calls, the self
// access review and the attach over WebSocket (channel protocol v5),
// whose container echoes stdin to stdout until stdin is closed.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

type fakeAPI struct {
	t       *testing.T
	mu      sync.Mutex
	pods    map[string]Pod // ns/name
	deny    map[string]bool
	deletes []string
	token   string
	stdin   bytes.Buffer // what the container's stdin got
	closed  chan struct{}
	proto   string    // the subprotocol the server speaks; "" v5
	refuse  *APIError // the answer to every pod create (and its dry run)
	dryRuns int
	levels  map[string]string // namespace: its enforce label; a namespace not here is forbidden to read
	lastPod Pod               // the last pod created or dry-run
}

func newFake(t *testing.T) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{t: t, pods: map[string]Pod{}, deny: map[string]bool{}, token: "tok-123", closed: make(chan struct{})}
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		http.Error(w, `{"reason":"Unauthorized","message":"no token"}`, 401)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/version":
		json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.37.2"})
	case r.URL.Path == "/api/v1/nodes/localhost":
		if f.deny["get nodes/"] {
			w.WriteHeader(403)
			io.WriteString(w, `{"reason":"Forbidden","message":"nodes is forbidden"}`)
			return
		}
		io.WriteString(w, `{"status":{"images":[{"names":["localhost/deathwatch/watcher:1","sha256:00"]},{"names":["docker.io/library/busybox:1"]}]}}`)
	case len(p) == 4 && p[2] == "namespaces" && r.Method == "GET":
		level, ok := f.levels[p[3]]
		if !ok {
			w.WriteHeader(403)
			io.WriteString(w, `{"reason":"Forbidden","message":"namespaces is forbidden"}`)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"name": p[3], "labels": map[string]string{enforceLabel: level}}})
	case strings.HasSuffix(r.URL.Path, "selfsubjectaccessreviews"):
		var rev struct {
			Spec struct {
				RA map[string]string `json:"resourceAttributes"`
			} `json:"spec"`
		}
		json.NewDecoder(r.Body).Decode(&rev)
		key := rev.Spec.RA["verb"] + " " + rev.Spec.RA["resource"] + "/" + rev.Spec.RA["subresource"]
		json.NewEncoder(w).Encode(map[string]any{"status": map[string]bool{"allowed": !f.deny[key]}})
	case len(p) == 5 && p[4] == "pods" && r.Method == "POST":
		var pod Pod
		json.NewDecoder(r.Body).Decode(&pod)
		f.lastPod = pod
		if f.refuse != nil {
			w.WriteHeader(f.refuse.Code)
			json.NewEncoder(w).Encode(map[string]string{"reason": f.refuse.Reason, "message": f.refuse.Message})
			return
		}
		if r.URL.Query().Get("dryRun") == "All" {
			f.dryRuns++
			w.WriteHeader(201)
			json.NewEncoder(w).Encode(pod)
			return
		}
		key := p[3] + "/" + pod.Metadata.Name
		if _, ok := f.pods[key]; ok {
			w.WriteHeader(409)
			return
		}
		pod.Status.Phase = "Running"
		cs := ContainerStatus{Name: ContainerName, ContainerID: "containerd://0123456789abcdef"}
		cs.State.Running = &StateDetail{}
		pod.Status.ContainerStatuses = []ContainerStatus{cs}
		f.pods[key] = pod
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(pod)
	case len(p) == 5 && p[4] == "pods" && r.Method == "GET":
		sel := strings.SplitN(r.URL.Query().Get("labelSelector"), "=", 2)
		var items []Pod
		for k, pod := range f.pods {
			if strings.HasPrefix(k, p[3]+"/") && len(sel) == 2 && pod.Metadata.Labels[sel[0]] == sel[1] {
				items = append(items, pod)
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"items": items})
	case len(p) == 6 && r.Method == "GET":
		pod, ok := f.pods[p[3]+"/"+p[5]]
		if !ok {
			w.WriteHeader(404)
			io.WriteString(w, `{"reason":"NotFound","message":"pods not found"}`)
			return
		}
		json.NewEncoder(w).Encode(pod)
	case len(p) == 6 && r.Method == "DELETE":
		var opts map[string]any
		json.NewDecoder(r.Body).Decode(&opts)
		if opts["gracePeriodSeconds"] != float64(0) {
			f.t.Errorf("delete with %v, want grace period 0", opts)
		}
		f.deletes = append(f.deletes, p[3]+"/"+p[5])
		if _, ok := f.pods[p[3]+"/"+p[5]]; !ok {
			w.WriteHeader(404)
			return
		}
		delete(f.pods, p[3]+"/"+p[5])
	case len(p) == 7 && p[6] == "exec":
		q := r.URL.Query()
		if q.Get("container") != ContainerName || q.Get("stdin") != "true" || q.Get("stdout") != "true" || len(q["command"]) != 3 || q["command"][1] != "relay" || q["command"][2] != ControlSocket {
			f.t.Errorf("exec query %v", q)
		}
		f.mu.Unlock()
		f.attach(w, r)
		f.mu.Lock()
	default:
		f.t.Errorf("unexpected %s %s", r.Method, r.URL)
		w.WriteHeader(400)
	}
}

func (f *fakeAPI) attach(w http.ResponseWriter, r *http.Request) {
	proto := f.proto
	if proto == "" {
		proto = "v5.channel.k8s.io"
	}
	up := websocket.Upgrader{Subprotocols: []string{proto}}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		f.t.Errorf("upgrade: %v", err)
		return
	}
	defer ws.Close()
	ws.WriteMessage(websocket.BinaryMessage, []byte("\x02watcher: hello from stderr\n"))
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			if proto != "v5.channel.k8s.io" {
				close(f.closed) // v4: the end of the attach is the end of stdin
			}
			return
		}
		switch {
		case msg[0] == chanStdin:
			f.mu.Lock()
			f.stdin.Write(msg[1:])
			f.mu.Unlock()
			ws.WriteMessage(websocket.BinaryMessage, append([]byte{chanStdout}, msg[1:]...))
		case msg[0] == chanClose && len(msg) == 2 && msg[1] == chanStdin:
			close(f.closed)
			ws.WriteMessage(websocket.BinaryMessage, append([]byte{chanStatus}, `{"status":"Success"}`...))
			ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			return
		}
	}
}

// kubeconfigFor writes a kubeconfig for srv with a bearer token.
func kubeconfigFor(t *testing.T, srv *httptest.Server, token string) string {
	return kubeconfigWith(t, srv, "{token: "+token+"}", "")
}

// kubeconfigWith writes a kubeconfig for srv whose user is user (YAML)
// and whose cluster has the extra lines cluster (indented by 4).
func kubeconfigWith(t *testing.T, srv *httptest.Server, user, cluster string) string {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	kc := `apiVersion: v1
kind: Config
current-context: c
contexts:
- name: c
  context: {cluster: k, user: u, namespace: fromctx}
clusters:
- name: k
  cluster:
    server: ` + srv.URL + `
    certificate-authority-data: ` + base64.StdEncoding.EncodeToString(ca) + `
` + cluster + `users:
- name: u
  user: ` + user + `
`
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newRuntime(t *testing.T, env ...string) (*Runtime, *bytes.Buffer) {
	var stderr bytes.Buffer
	rt, err := supervisor.NewRuntime(Name, supervisor.RuntimeConfig{EngineEnv: env, Stderr: &syncWriter{w: &stderr}})
	if err != nil {
		t.Fatal(err)
	}
	return rt.(*Runtime), &stderr
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func TestLifecycleAgainstFakeAPI(t *testing.T) {
	f, srv := newFake(t)
	kc := kubeconfigFor(t, srv, f.token)
	rt, stderr := newRuntime(t, "KUBECONFIG="+kc, EnvNamespace+"=ns", EnvPullNever+"=1")
	ctx := context.Background()

	info, err := rt.Probe(ctx)
	if err != nil || !info.Present || info.Version != "v1.37.2" {
		t.Fatalf("Probe = %+v, %v", info, err)
	}
	b := testBox()
	if err := rt.Prepare(ctx, b); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if b.State[stateNamespace] != "ns" || b.State[stateServer] != srv.URL {
		t.Errorf("state %v", b.State)
	}
	if err := rt.Create(ctx, b); err != nil {
		t.Fatalf("Create: %v", err)
	}
	pod := f.pods["ns/"+b.Name]
	if pod.Spec.Containers[0].ImagePullPolicy != "Never" || pod.Metadata.Labels[shared.LabelNonce] != b.Nonce {
		t.Errorf("created pod %+v", pod)
	}
	st, err := rt.Start(ctx, b)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	// Frames both ways, as the lifecycle speaks them.
	if err := shared.NewWriter(st.Control).Send(shared.FramePing, []byte("x")); err != nil {
		t.Fatal(err)
	}
	fr, err := shared.NewReader(st.Control).Next()
	if err != nil || fr.Type != shared.FramePing || string(fr.Payload) != "x" {
		t.Fatalf("echoed frame %+v %v", fr, err)
	}
	if err := st.Control.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not close the container's stdin")
	}
	if err := st.Wait(); err != nil {
		t.Errorf("Wait: %v", err)
	}
	if !strings.Contains(stderr.String(), "watcher: hello from stderr") {
		t.Errorf("the container's stderr was not relayed: %q", stderr.String())
	}
	ls, err := rt.List(ctx, "ci")
	if err != nil || len(ls) != 1 || ls[0].Name != b.Name || ls[0].Labels[shared.LabelNonce] != b.Nonce || !ls[0].Running {
		t.Errorf("List = %+v, %v", ls, err)
	}
	if ls, _ := rt.List(ctx, "other"); len(ls) != 0 {
		t.Errorf("List(other) = %+v", ls)
	}
	if ok, err := rt.Exists(ctx, b); !ok || err != nil {
		t.Errorf("Exists = %v, %v", ok, err)
	}
	if err := rt.Remove(ctx, b); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := rt.Remove(ctx, b); err != nil {
		t.Errorf("Remove of a gone pod: %v", err)
	}
	if ok, err := rt.Exists(ctx, b); ok || err != nil {
		t.Errorf("Exists after Remove = %v, %v", ok, err)
	}
	// Reconcile's box from the journal: the server it was made on.
	jb := &supervisor.Box{Name: b.Name, State: map[string]string{stateNamespace: "ns", stateServer: "https://elsewhere:6443"}}
	if err := rt.Remove(ctx, jb); err == nil || !strings.Contains(err.Error(), "elsewhere") {
		t.Errorf("Remove of another cluster's pod = %v, want a refusal naming it", err)
	}
	if stdin := f.stdin.String(); strings.Contains(stdin, "tok-123") {
		t.Errorf("the token reached the container's stdin")
	}
}

func TestProbeNamesWhatRBACDenies(t *testing.T) {
	f, srv := newFake(t)
	f.deny["create pods/exec"] = true
	rt, _ := newRuntime(t, "KUBECONFIG="+kubeconfigFor(t, srv, f.token))
	info, err := rt.Probe(context.Background())
	if err == nil || info.Present {
		t.Fatalf("Probe = %+v, %v; want a refusal", info, err)
	}
	if !strings.Contains(info.Detail, "create pods/exec") || !strings.Contains(info.Detail, "namespace fromctx") || !strings.Contains(info.Detail, "kubernetes rbac") {
		t.Errorf("detail %q: want the verb, the context's namespace and the fix", info.Detail)
	}
}

func TestProbeBadToken(t *testing.T) {
	_, srv := newFake(t)
	rt, _ := newRuntime(t, "KUBECONFIG="+kubeconfigFor(t, srv, "wrong"))
	if _, err := rt.Probe(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Probe with a wrong token = %v", err)
	}
}

func TestStartReportsAStuckPod(t *testing.T) {
	f, srv := newFake(t)
	rt, _ := newRuntime(t, "KUBECONFIG="+kubeconfigFor(t, srv, f.token), EnvNamespace+"=ns")
	ctx := context.Background()
	b := testBox()
	if err := rt.Prepare(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := rt.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	p := f.pods["ns/"+b.Name]
	cs := ContainerStatus{Name: ContainerName}
	cs.State.Waiting = &StateDetail{Reason: "ErrImageNeverPull", Message: "image not present"}
	p.Status = PodStatus{Phase: "Pending", ContainerStatuses: []ContainerStatus{cs}}
	f.pods["ns/"+b.Name] = p
	f.mu.Unlock()
	_, err := rt.Start(ctx, b)
	if err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") || exitcode.Of(err, 0) != shared.ExitImage {
		t.Errorf("Start = %v (code %d), want an image failure (242) naming ErrImageNeverPull", err, exitcode.Of(err, 0))
	}
}

// A v4 server cannot close stdin alone: Close ends the attach, which
// with stdinOnce is the container's stdin EOF.
func TestAttachV4CloseEndsTheAttach(t *testing.T) {
	f, srv := newFake(t)
	f.proto = "v4.channel.k8s.io"
	rt, _ := newRuntime(t, "KUBECONFIG="+kubeconfigFor(t, srv, f.token), EnvNamespace+"=ns")
	ctx := context.Background()
	b := testBox()
	if err := rt.Prepare(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := rt.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	st, err := rt.Start(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Control.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(st.Control, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	st.Control.Close()
	select {
	case <-f.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close on v4 did not end the attach")
	}
	st.Wait()
}
