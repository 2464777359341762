package docker

import (
	"reflect"
	"strings"
	"testing"

	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

func TestCreateArgs(t *testing.T) {
	const bounds = "(read-only root, bounded /tmp and /dev/shm)"
	base := supervisor.Box{
		Name: "dw-1", Image: "img", WatcherPath: "/opt/dw/watcher",
		Labels: map[string]string{"io.deathwatch.nonce": "n", "io.deathwatch.instance": "i", "team": "a,b"},
	}
	head := []string{"create", "--interactive", "--name", "dw-1", "--pull", "never", "--init=false", "--restart", "no", "--rm",
		"--log-driver", "none", "--cap-drop", "ALL", "--cap-add", "SETUID", "--cap-add", "SETGID", "--cap-add", "SETPCAP", "--cap-add", "KILL", "--cap-add", "CHOWN", "--cap-add", "DAC_OVERRIDE",
		"--security-opt", "no-new-privileges", "--env", "GOMAXPROCS=1", "--env", "GODEBUG=profstackdepth=0",
		"--label", "io.deathwatch.instance=i", "--label", "io.deathwatch.nonce=n", "--label", "team=a,b"}
	for _, tc := range []struct {
		name string
		mod  func(*supervisor.Box)
		want []string // after head
	}{
		{"minimal: network none, bind-mounted watcher", func(*supervisor.Box) {},
			[]string{"--network", "none", "--pids-limit", "4096", "--memory", "4294967296", "--memory-swap", "4294967296", bounds, "--volume", "/opt/dw/watcher:/dw/watcher:ro", "--entrypoint", "/dw/watcher", "--", "img", "--control=stdin"}},
		{"limits, workdir, mounts", func(b *supervisor.Box) {
			b.Network, b.PidsLimit, b.Memory, b.Workdir = "bridge", 64, 512<<20, "/work"
			b.Mounts = []supervisor.Mount{{Source: "/src", Target: "/dst", ReadOnly: true}, {Source: "/a", Target: "/b"}}
		}, []string{"--network", "bridge", "--pids-limit", "64", "--memory", "536870912", "--memory-swap", "536870912", bounds, "--workdir", "/work",
			"--volume", "/src:/dst:ro", "--volume", "/a:/b",
			"--volume", "/opt/dw/watcher:/dw/watcher:ro", "--entrypoint", "/dw/watcher", "--", "img", "--control=stdin"}},
		{"watcher in image: no bind mount", func(b *supervisor.Box) { b.WatcherInImage = "/usr/local/bin/watcher" },
			[]string{"--network", "none", "--pids-limit", "4096", "--memory", "4294967296", "--memory-swap", "4294967296", bounds, "--entrypoint", "/usr/local/bin/watcher", "--", "img", "--control=stdin"}},
		{"--read-write-root, ids of the box's own, an engine that cannot enforce limits", func(b *supervisor.Box) {
			b.ReadWriteRoot = true
			b.OwnIDs = &supervisor.OwnIDs{AgentUID: 7, AgentGID: 8, WatcherUID: 9, WatcherGID: 10}
		}, []string{"--network", "none", "--shm-size", "268435456",
			"--volume", "/opt/dw/watcher:/dw/watcher:ro", "--entrypoint", "/dw/watcher", "--", "img", "--control=stdin", "--watcher-user=9:10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := base
			tc.mod(&b)
			// Podman's binds are nosuid and nodev; dockerd refuses those.
			podman := map[string]string{"/opt/dw/watcher:/dw/watcher:ro": "/opt/dw/watcher:/dw/watcher:ro,nosuid,nodev",
				"/src:/dst:ro": "/src:/dst:ro,nosuid,nodev", "/a:/b": "/a:/b:nosuid,nodev"}
			// Docker's are --mount type=bind (a missing source fails).
			docker := map[string]string{"/opt/dw/watcher:/dw/watcher:ro": "type=bind,source=/opt/dw/watcher,target=/dw/watcher,readonly",
				"/src:/dst:ro": "type=bind,source=/src,target=/dst,readonly", "/a:/b": "type=bind,source=/a,target=/b"}
			for _, kind := range []string{"docker", "podman"} {
				got := createArgs(kind, &b, boxConf{unbounded: b.ReadWriteRoot})
				tmp := "/tmp:rw,exec,nosuid,nodev,size=1073741824,mode=1777,nr_inodes=262144"
				if kind == "podman" {
					tmp = "/tmp:rw,exec,nosuid,nodev,size=1073741824,mode=1777"
				}
				var want []string
				for i, a := range append(append([]string{}, head...), tc.want...) {
					v, ok := podman[a]
					dv, dok := docker[a]
					switch {
					case a == bounds:
						want = append(want, "--read-only", "--tmpfs", tmp, "--shm-size", "268435456")
					case kind == "podman" && ok && i > 0 && want[len(want)-1] == "--volume":
						want = append(want, v)
					case kind == "docker" && a == "--volume":
						want = append(want, "--mount")
					case kind == "docker" && dok && i > 0 && want[len(want)-1] == "--mount":
						want = append(want, dv)
					default:
						want = append(want, a)
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s:\n got %q\nwant %q", kind, got, want)
				}
			}
		})
	}
}

func TestCreateArgsUserns(t *testing.T) {
	b := supervisor.Box{Name: "dw-1", Image: "img", WatcherPath: "/w"}
	a := strings.Join(createArgs("podman", &b, boxConf{userns: "auto"}), " ")
	if !strings.Contains(a, "--security-opt no-new-privileges --userns auto --env") {
		t.Errorf("podman --userns auto: %s", a)
	}
}

func TestHasSubIDs(t *testing.T) {
	for _, tc := range []struct {
		file string
		want bool
	}{
		{"dwtest:100000:65536\ncontainers:1073741824:268435456\n", true},
		{"dwtest:100000:65536\n", false},
		{"containers:100000:1000\n", false}, // too few for one box
		{"#containers:1:65536\nxcontainers:1:65536", false},
	} {
		if got := hasSubIDs(tc.file, []string{"containers"}, 65536); got != tc.want {
			t.Errorf("hasSubIDs(%q) = %v", tc.file, got)
		}
	}
	// A rootless user needs room for two boxes' 65536 ids, named by
	// name or by uid.
	me := []string{"2345", "dwtest"}
	for file, want := range map[string]bool{"dwtest:100000:65536\n": false, "dwtest:100000:1048576\n": true, "2345:100000:131072\n": true} {
		if got := hasSubIDs(file, me, 2*65536); got != want {
			t.Errorf("hasSubIDs(%q, %v, 131072) = %v", file, me, got)
		}
	}
}

func TestEngineArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []string
		want []string
	}{
		{"docker start", startArgs("docker", "dw-1"), []string{"start", "--attach", "--interactive", "--", "dw-1"}},
		{"podman start", startArgs("podman", "dw-1"), []string{"start", "--attach", "--interactive", "--", "dw-1"}},
		{"docker rm", removeArgs("docker", "dw-1"), []string{"rm", "--force", "--", "dw-1"}},
		// Without --time 0 podman waits out a 10 s stop timeout.
		{"podman rm", removeArgs("podman", "dw-1"), []string{"rm", "--force", "--time", "0", "--", "dw-1"}},
		{"docker ps", listArgs("docker", "ci"), []string{"ps", "--all", "--no-trunc", "--filter", "label=io.deathwatch.instance=ci", "--format", `{"Names":{{json .Names}},"State":{{json .State}},"Labels":{{json .Labels}},"DW":{"io.deathwatch.managed":{{json (.Label "io.deathwatch.managed")}},"io.deathwatch.instance":{{json (.Label "io.deathwatch.instance")}},"io.deathwatch.run-key":{{json (.Label "io.deathwatch.run-key")}},"io.deathwatch.launch-id":{{json (.Label "io.deathwatch.launch-id")}},"io.deathwatch.nonce":{{json (.Label "io.deathwatch.nonce")}}}}`}},
		{"podman ps", listArgs("podman", "ci"), []string{"ps", "--all", "--no-trunc", "--filter", "label=io.deathwatch.instance=ci", "--format", "json"}},
		{"docker image check", imageCheckArgs("docker", "img:1"), []string{"image", "inspect", "--format", "{{.Id}}", "--", "img:1"}},
		{"podman image check", imageCheckArgs("podman", "img:1"), []string{"image", "exists", "--", "img:1"}},
		{"named", namedArgs("dw-1"), []string{"ps", "--all", "--no-trunc", "--filter", "name=dw-1", "--format", "{{.Names}}"}},
		{"docker info", infoArgs("docker"), []string{"info", "--format", "{{.ServerVersion}}|{{json .SecurityOptions}}"}},
		{"podman info", infoArgs("podman"), []string{"info", "--format", "{{.Version.Version}}|{{.Host.Security.Rootless}}"}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestParseInfo(t *testing.T) {
	for _, tc := range []struct {
		kind, out string
		version   string
		rootless  bool
		remap     bool
		err       bool
	}{
		{"docker", `20.10.24|["name=seccomp,profile=default"]` + "\n", "20.10.24", false, false, false},
		{"docker", `25.0|["name=seccomp,profile=builtin","name=rootless","name=cgroupns"]`, "25.0", true, false, false},
		{"docker", `20.10.24|["name=seccomp,profile=default","name=userns"]`, "20.10.24", false, true, false},
		{"podman", "4.3.1|true\n", "4.3.1", true, false, false},
		{"podman", "4.3.1|false", "4.3.1", false, false, false},
		{"docker", "garbage", "", false, false, true},
		{"docker", "1|not json", "", false, false, true},
	} {
		v, r, m, err := parseInfo(tc.kind, tc.out)
		if (err != nil) != tc.err || v != tc.version || r != tc.rootless || m != tc.remap {
			t.Errorf("parseInfo(%s, %q) = %q %v %v %v", tc.kind, tc.out, v, r, m, err)
		}
	}
}

func TestParseList(t *testing.T) {
	d := `{"Names":"dw-a","Labels":"io.deathwatch.instance=ci,team=x,y,io.deathwatch.nonce=n1","State":"running","DW":{"io.deathwatch.instance":"ci","io.deathwatch.nonce":"n1"}}
{"Names":"dw-b","Labels":"","State":"exited"}`
	got, err := parseList("docker", []byte(d))
	want := []supervisor.Listed{
		{Name: "dw-a", Labels: map[string]string{"io.deathwatch.instance": "ci", "team": "x,y", "io.deathwatch.nonce": "n1"}, Running: true},
		{Name: "dw-b", Labels: map[string]string{}},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("docker: %+v %v", got, err)
	}
	// A user label whose value smuggles a deathwatch label: the
	// deathwatch labels come from the label map by key, never from the
	// comma-joined string.
	for _, order := range []string{
		"io.deathwatch.instance=ci,io.deathwatch.nonce=real,task=a,io.deathwatch.nonce=x",
		"io.deathwatch.instance=ci,task=a,io.deathwatch.nonce=x,io.deathwatch.nonce=real",
		"io.deathwatch.instance=ci,task=a,io.deathwatch.nonce=x",
	} {
		dw := `{"io.deathwatch.instance":"ci","io.deathwatch.nonce":"real"}`
		if !strings.Contains(order, "=real") {
			dw = `{"io.deathwatch.instance":"ci"}` // the box has no nonce label of its own
		}
		got, err := parseList("docker", []byte(`{"Names":"dw-a","Labels":"`+order+`","State":"running","DW":`+dw+`}`))
		if err != nil || len(got) != 1 || got[0].Labels["io.deathwatch.instance"] != "ci" {
			t.Fatalf("%s: %+v %v", order, got, err)
		}
		if n, ok := got[0].Labels["io.deathwatch.nonce"]; ok && n != "real" {
			t.Errorf("%s: nonce %q taken from a user label's value", order, n)
		}
	}
	p := `[{"Names":["dw-a"],"Labels":{"io.deathwatch.nonce":"n1"},"State":"running"},{"Names":["dw-b"],"Labels":null,"State":"exited"}]`
	got, err = parseList("podman", []byte(p))
	want = []supervisor.Listed{{Name: "dw-a", Labels: map[string]string{"io.deathwatch.nonce": "n1"}, Running: true}, {Name: "dw-b"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("podman: %+v %v", got, err)
	}
	if got, err := parseList("podman", []byte("  \n")); err != nil || got != nil {
		t.Errorf("empty: %v %v", got, err)
	}
}

// Whether the engine has a box is read from its listing (stdout), never
// from a failure's words: the name filter matches substrings, so only an
// exact name counts.
func TestListsName(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{"dw-1\n", true},
		{"dw-10\ndw-1-x\n", false},
		{"other,/dw-1\n", true},
		{"", false},
		{"WARN[0000] a first-run notice on stdout\ndw-1\n", true},
	} {
		if got := listsName([]byte(tc.out), "dw-1"); got != tc.want {
			t.Errorf("listsName(%q) = %v", tc.out, got)
		}
	}
	if !strings.Contains((&cliError{stderr: "x"}).Error(), "x") {
		t.Error("cliError text")
	}
}

func TestCheckLimits(t *testing.T) {
	for _, tc := range []struct {
		rootless     bool
		memory, pids int64
		refusedOnV1  bool
	}{
		{false, 64 << 20, 50, false},
		{true, 0, 0, false},
		{true, 64 << 20, 0, true},
		{true, 0, 50, true},
	} {
		err := (&Engine{Kind: "podman", rootless: tc.rootless}).CheckLimits(tc.memory, tc.pids)
		want := tc.refusedOnV1 && !hostCgroupUnified()
		if (err != nil) != want || (err != nil && exitcode.Of(err, 0) != 243) {
			t.Errorf("%+v: %v (cgroup v2 host: %v)", tc, err, hostCgroupUnified())
		}
	}
}

func TestImageWatcherArgs(t *testing.T) {
	want := []string{"run", "--rm", "--pull", "never", "--network", "none", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--entrypoint", "/usr/local/bin/watcher", "--", "img:1", "--version"}
	if got := imageWatcherArgs("img:1", "/usr/local/bin/watcher"); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q", got)
	}
	if got := inspectPidArgs("dw-1"); !reflect.DeepEqual(got, []string{"container", "inspect", "--format", "{{.State.Pid}}", "--", "dw-1"}) {
		t.Errorf("inspectPidArgs %q", got)
	}
}

// --mount fields are CSV: a path with a comma or a quote stays one field.
func TestMountFlag(t *testing.T) {
	for _, tc := range []struct {
		m    apiMount
		want string
	}{
		{bindMount("/src", "/dst", false), "type=bind,source=/src,target=/dst"},
		{bindMount("/src", "/dst", true), "type=bind,source=/src,target=/dst,readonly"},
		{bindMount("/a,b", `/c"d`, false), `type=bind,"source=/a,b","target=/c""d"`},
	} {
		if got := mountFlag(tc.m); got != tc.want {
			t.Errorf("mountFlag(%+v) = %s, want %s", tc.m, got, tc.want)
		}
	}
}

func TestDockerHostHint(t *testing.T) {
	denied := "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock"
	for _, tc := range []struct {
		name    string
		env     map[string]string
		failure string
		sock    string
		want    string // "" = no hint
	}{
		{"denied, a rootless socket there", map[string]string{}, denied, "/run/user/7/docker.sock", "set DOCKER_HOST=unix:///run/user/7/docker.sock"},
		{"denied, none found", map[string]string{}, denied, "", "set DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock"},
		{"DOCKER_HOST set", map[string]string{"DOCKER_HOST": "unix:///x"}, denied, "/run/user/7/docker.sock", ""},
		{"a context named", map[string]string{"DOCKER_CONTEXT": "remote"}, denied, "", ""},
		{"daemon down", map[string]string{}, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?", "", ""},
	} {
		got := dockerHostHint(tc.env, tc.failure, tc.sock)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: hint %q, want one with %q", tc.name, got, tc.want)
		}
	}
}
