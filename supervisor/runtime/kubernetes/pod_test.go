package kubernetes

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"deathwatch/shared"
	"deathwatch/supervisor"
)

func testBox() *supervisor.Box {
	return &supervisor.Box{
		Name: "dw-20261130-180000-abcd1234", LaunchID: "20261130-180000-abcd1234", Nonce: "00ff",
		Labels: map[string]string{
			shared.LabelManaged: "true", shared.LabelInstance: "ci", shared.LabelLaunchID: "20261130-180000-abcd1234",
			shared.LabelNonce: "00ff", "team": "a",
		},
		Image: "localhost/deathwatch/watcher:1", WatcherInImage: "/usr/local/bin/watcher", State: map[string]string{},
	}
}

func TestBuildPod(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*supervisor.Box)
		o     Options
		check func(t *testing.T, p Pod)
	}{
		{"watcher in image: PID 1 in the unix control mode, gated by the nonce; no stdin, no tty; the relay's command", nil, Options{Namespace: "ns"}, func(t *testing.T, p Pod) {
			c := p.Spec.Containers[0]
			if got := strings.Join(c.Command, " "); got != "/usr/local/bin/watcher --control=unix:/run/deathwatch/ctl/control.sock --nonce=00ff" {
				t.Errorf("command %q", got)
			}
			if c.Stdin || c.StdinOnce || c.TTY {
				t.Errorf("stdin %v stdinOnce %v tty %v, want all false (the container's stdout is the log)", c.Stdin, c.StdinOnce, c.TTY)
			}
			if len(p.Spec.InitContainers) != 0 || len(p.Spec.Volumes) != 3 {
				t.Errorf("an init container or a volume beside /tmp, /dev/shm and the control socket's with a watcher in the image: %+v", p.Spec.Volumes)
			}
			if v, m := p.Spec.Volumes[2], c.VolumeMounts[2]; v.Name != controlVolume || *v.EmptyDir != (EmptyDir{Medium: "Memory", SizeLimit: "1Mi"}) || m.Name != controlVolume || m.MountPath != "/run/deathwatch" || m.ReadOnly {
				t.Errorf("the control socket's volume %+v mount %+v", v, m)
			}
			b := testBox()
			if got := strings.Join(RelayCommand(b), " "); got != "/usr/local/bin/watcher relay /run/deathwatch/ctl/control.sock" {
				t.Errorf("relay command %q", got)
			}
			if c.ImagePullPolicy != "" {
				t.Errorf("pull policy %q, want none", c.ImagePullPolicy)
			}
		}},
		{"pod-level: restart Never, no token, no service links, grace 0, RuntimeDefault seccomp, the namespace", nil, Options{Namespace: "ns", Node: "localhost"}, func(t *testing.T, p Pod) {
			s := p.Spec
			if s.RestartPolicy != "Never" || *s.AutomountServiceAccountToken || *s.EnableServiceLinks || *s.TerminationGracePeriodSeconds != 0 {
				t.Errorf("spec %+v", s)
			}
			if s.SecurityContext.SeccompProfile.Type != "RuntimeDefault" || s.NodeName != "localhost" || p.Metadata.Namespace != "ns" {
				t.Errorf("seccomp %v node %q ns %q", s.SecurityContext.SeccompProfile, s.NodeName, p.Metadata.Namespace)
			}
			if p.Metadata.Name != "dw-20261130-180000-abcd1234" {
				t.Errorf("name %q", p.Metadata.Name)
			}
		}},
		{"labels and nonce as labels and annotations", nil, Options{Namespace: "ns"}, func(t *testing.T, p Pod) {
			for _, m := range []map[string]string{p.Metadata.Labels, p.Metadata.Annotations} {
				if m[shared.LabelNonce] != "00ff" || m[shared.LabelInstance] != "ci" || m["team"] != "a" || m[shared.LabelManaged] != "true" {
					t.Errorf("metadata %v", m)
				}
			}
		}},
		{"the watcher's identity: root with its five capabilities, no escalation, not privileged", nil, Options{Namespace: "ns"}, func(t *testing.T, p Pod) {
			s := p.Spec.Containers[0].SecurityContext
			if *s.RunAsUser != 0 || *s.RunAsGroup != 0 || *s.RunAsNonRoot || *s.AllowPrivilegeEscalation || *s.Privileged {
				t.Errorf("security %+v", s)
			}
			if strings.Join(s.Capabilities.Drop, ",") != "ALL" || strings.Join(s.Capabilities.Add, ",") != "SETUID,SETGID,SETPCAP,KILL,CHOWN" {
				t.Errorf("capabilities %+v", s.Capabilities)
			}
			if s.SeccompProfile.Type != "RuntimeDefault" {
				t.Errorf("seccomp %v", s.SeccompProfile)
			}
			want := []EnvVar{{Name: "GOMAXPROCS", Value: "1"}, {Name: "GODEBUG", Value: "profstackdepth=0"}}
			if e := p.Spec.Containers[0].Env; !reflect.DeepEqual(e, want) {
				t.Errorf("env %v: the watcher's environment holds %v alone", e, want)
			}
		}},
		{"restricted: the agent's ids, no capability, non-root, the watcher in restricted mode, the rest as in baseline", func(b *supervisor.Box) { b.AgentUID, b.AgentGID = 2000, 3000 }, Options{Namespace: "ns", PodSecurity: PodSecurityRestricted}, func(t *testing.T, p Pod) {
			c := p.Spec.Containers[0]
			s := c.SecurityContext
			if *s.RunAsUser != 2000 || *s.RunAsGroup != 3000 || !*s.RunAsNonRoot || *s.AllowPrivilegeEscalation || *s.Privileged || !*s.ReadOnlyRootFilesystem {
				t.Errorf("security %+v", s)
			}
			if strings.Join(s.Capabilities.Drop, ",") != "ALL" || len(s.Capabilities.Add) != 0 || s.SeccompProfile.Type != "RuntimeDefault" {
				t.Errorf("capabilities %+v seccomp %v", s.Capabilities, s.SeccompProfile)
			}
			if got := strings.Join(c.Command, " "); got != "/usr/local/bin/watcher --control=unix:/run/deathwatch/ctl/control.sock --nonce=00ff --restricted" {
				t.Errorf("command %q", got)
			}
			base := BuildPod(testBox(), Options{Namespace: "ns"})
			if !reflect.DeepEqual(p.Spec.Volumes, base.Spec.Volumes) || !reflect.DeepEqual(c.VolumeMounts, base.Spec.Containers[0].VolumeMounts) || !reflect.DeepEqual(c.Resources, base.Spec.Containers[0].Resources) || c.StdinOnce {
				t.Errorf("restricted changed more than the identity: %+v", c)
			}
		}},
		{"restricted, default ids: 1000:1000", nil, Options{Namespace: "ns", PodSecurity: PodSecurityRestricted}, func(t *testing.T, p Pod) {
			if s := p.Spec.Containers[0].SecurityContext; *s.RunAsUser != 1000 || *s.RunAsGroup != 1000 {
				t.Errorf("runs as %d:%d", *s.RunAsUser, *s.RunAsGroup)
			}
		}},
		{"the walls by default: read-only root, bounded memory-backed /tmp and /dev/shm, memory and storage bounds, no host namespaces", nil, Options{Namespace: "ns"}, func(t *testing.T, p Pod) {
			c := p.Spec.Containers[0]
			if !*c.SecurityContext.ReadOnlyRootFilesystem || p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC || p.Spec.HostUsers != nil {
				t.Errorf("read-only root %v, host network/pid/ipc %v %v %v, hostUsers %v", *c.SecurityContext.ReadOnlyRootFilesystem, p.Spec.HostNetwork, p.Spec.HostPID, p.Spec.HostIPC, p.Spec.HostUsers)
			}
			want := map[string]EmptyDir{"/tmp": {Medium: "Memory", SizeLimit: "1073741824"}, "/dev/shm": {Medium: "Memory", SizeLimit: "268435456"}, controlMount: {Medium: "Memory", SizeLimit: "1Mi"}}
			for i, m := range c.VolumeMounts {
				if e := p.Spec.Volumes[i].EmptyDir; m.Name != p.Spec.Volumes[i].Name || e == nil || *e != want[m.MountPath] {
					t.Errorf("mount %+v of volume %+v, want %+v", m, p.Spec.Volumes[i], want[m.MountPath])
				}
			}
			r := c.Resources
			if r.Limits["memory"] != "4294967296" || r.Limits["ephemeral-storage"] != "1Gi" || r.Requests["memory"] != "64Mi" || r.Requests["ephemeral-storage"] != "64Mi" {
				t.Errorf("resources %+v: want the default memory bound as the limit, 1Gi of storage, small requests", r)
			}
			js, _ := json.Marshal(p.Spec)
			for _, f := range []string{`"hostNetwork":false`, `"hostPID":false`, `"hostIPC":false`, `"automountServiceAccountToken":false`} {
				if !strings.Contains(string(js), f) {
					t.Errorf("the body does not say %s: %s", f, js)
				}
			}
		}},
		{"a writable root: no /tmp of its own; a user namespace", func(b *supervisor.Box) { b.ReadWriteRoot = true }, Options{Namespace: "ns", UserNamespace: true}, func(t *testing.T, p Pod) {
			c := p.Spec.Containers[0]
			if *c.SecurityContext.ReadOnlyRootFilesystem || len(c.VolumeMounts) != 2 || c.VolumeMounts[0].MountPath != "/dev/shm" {
				t.Errorf("read-only %v mounts %+v", *c.SecurityContext.ReadOnlyRootFilesystem, c.VolumeMounts)
			}
			if p.Spec.HostUsers == nil || *p.Spec.HostUsers {
				t.Errorf("hostUsers %v, want false", p.Spec.HostUsers)
			}
		}},
		{"memory is limit and request; pull Never; workdir", func(b *supervisor.Box) { b.Memory = 256 << 20; b.Workdir = "/w" }, Options{Namespace: "ns", PullNever: true}, func(t *testing.T, p Pod) {
			c := p.Spec.Containers[0]
			if c.Resources.Limits["memory"] != "268435456" || c.Resources.Requests["memory"] != "268435456" {
				t.Errorf("resources %+v", c.Resources)
			}
			if c.ImagePullPolicy != "Never" || c.WorkingDir != "/w" {
				t.Errorf("pull %q workdir %q", c.ImagePullPolicy, c.WorkingDir)
			}
		}},
		{"watcher image: an init container copies it into an emptyDir the box mounts read-only", func(b *supervisor.Box) { b.WatcherInImage = "" }, Options{Namespace: "ns", WatcherImage: "w:1", PullNever: true}, func(t *testing.T, p Pod) {
			ic := p.Spec.InitContainers
			if len(ic) != 1 || ic[0].Image != "w:1" || strings.Join(ic[0].Command, " ") != "cp /usr/local/bin/watcher /dw/watcher" || ic[0].ImagePullPolicy != "Never" {
				t.Fatalf("init containers %+v", ic)
			}
			if s := ic[0].SecurityContext; *s.RunAsUser != 65534 || !*s.RunAsNonRoot || len(s.Capabilities.Add) != 0 {
				t.Errorf("the copy runs as %d with %v", *s.RunAsUser, s.Capabilities.Add)
			}
			c := p.Spec.Containers[0]
			dw := c.VolumeMounts[len(c.VolumeMounts)-1]
			if c.Command[0] != supervisor.WatcherMountPoint || len(c.VolumeMounts) != 4 || !dw.ReadOnly || dw.MountPath != "/dw" || dw.Name != watcherVolume {
				t.Errorf("box command %v mounts %+v", c.Command, c.VolumeMounts)
			}
			if v := p.Spec.Volumes[len(p.Spec.Volumes)-1]; len(p.Spec.Volumes) != 4 || v.Name != watcherVolume || v.EmptyDir == nil {
				t.Errorf("volumes %+v", p.Spec.Volumes)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBox()
			if tc.edit != nil {
				tc.edit(b)
			}
			if err := CheckBox(b, tc.o); err != nil {
				t.Fatalf("CheckBox: %v", err)
			}
			p := BuildPod(b, tc.o)
			tc.check(t, p)
			// What goes over the wire carries no status.
			js, _ := json.Marshal(p)
			if strings.Contains(string(js), `"status":{"`) {
				t.Errorf("body holds a status: %s", js)
			}
		})
	}
}

func TestCheckBoxRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*supervisor.Box, *Options)
		want string
	}{
		{"upper-case name", func(b *supervisor.Box, _ *Options) { b.Name = "Dw-1" }, "not a Kubernetes name"},
		{"bad namespace", func(_ *supervisor.Box, o *Options) { o.Namespace = "a_b" }, "namespace"},
		{"long label value", func(b *supervisor.Box, _ *Options) { b.Labels["x"] = strings.Repeat("a", 64) }, "label x="},
		{"bad label key", func(b *supervisor.Box, _ *Options) { b.Labels["a b"] = "1" }, "label key"},
		{"host mount", func(b *supervisor.Box, _ *Options) { b.Mounts = []supervisor.Mount{{Source: "/a", Target: "/b"}} }, "--mount"},
		{"network none", func(b *supervisor.Box, _ *Options) { b.Network, b.NetworkSet = "none", true }, "--network none"},
		{"network host", func(b *supervisor.Box, _ *Options) { b.Network, b.NetworkSet = "host", true }, "--network host"},
		{"no watcher", func(b *supervisor.Box, _ *Options) { b.WatcherInImage = "" }, "--watcher-in-image"},
		{"restricted as root", func(b *supervisor.Box, o *Options) {
			b.AgentUID, b.AgentGID, o.PodSecurity = 0, 7, PodSecurityRestricted
		}, "restricted refuses root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, o := testBox(), Options{Namespace: "ns"}
			tc.edit(b, &o)
			err := CheckBox(b, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("CheckBox = %v, want one line about %q", err, tc.want)
			}
		})
	}
	b := testBox()
	b.Network, b.NetworkSet = "bridge", true
	if err := CheckBox(b, Options{Namespace: "ns"}); err != nil {
		t.Errorf("--network bridge (the pod network): %v", err)
	}
}

func TestRequests(t *testing.T) {
	for _, tc := range []struct {
		r                   Request
		method, path, query string
		body                string
	}{
		{CreatePodRequest(Pod{Metadata: Meta{Name: "p", Namespace: "ns"}}), "POST", "/api/v1/namespaces/ns/pods", "", `"name":"p"`},
		{GetPodRequest("ns", "p"), "GET", "/api/v1/namespaces/ns/pods/p", "", ""},
		{DeletePodRequest("ns", "p"), "DELETE", "/api/v1/namespaces/ns/pods/p", "", `"gracePeriodSeconds":0`},
		{ListPodsRequest("ns", shared.LabelInstance, "ci"), "GET", "/api/v1/namespaces/ns/pods", "labelSelector=io.deathwatch.instance%3Dci", ""},
		{AccessReviewRequest("ns", "create", "pods", "attach"), "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "", `"subresource":"attach"`},
	} {
		js, _ := json.Marshal(tc.r.Body)
		if tc.r.Method != tc.method || tc.r.Path != tc.path || tc.r.Query.Encode() != tc.query || !strings.Contains(string(js), tc.body) {
			t.Errorf("%s %s?%s %s, want %s %s?%s containing %s", tc.r.Method, tc.r.Path, tc.r.Query.Encode(), js, tc.method, tc.path, tc.query, tc.body)
		}
	}
	if got, want := AttachURL("https://127.0.0.1:16443", "ns", "p", "box"), "wss://127.0.0.1:16443/api/v1/namespaces/ns/pods/p/attach?container=box&stderr=true&stdin=true&stdout=true"; got != want {
		t.Errorf("AttachURL = %s, want %s", got, want)
	}
}

func TestRunningState(t *testing.T) {
	st := func(name string, set func(*ContainerStatus)) ContainerStatus {
		cs := ContainerStatus{Name: name}
		set(&cs)
		return cs
	}
	running := func(cs *ContainerStatus) { cs.State.Running = &StateDetail{} }
	waiting := func(r string) func(*ContainerStatus) {
		return func(cs *ContainerStatus) { cs.State.Waiting = &StateDetail{Reason: r} }
	}
	exited := func(code int) func(*ContainerStatus) {
		return func(cs *ContainerStatus) { cs.State.Terminated = &StateDetail{Reason: "Error", ExitCode: code} }
	}
	del := "2026-11-30T00:00:00Z"
	for _, tc := range []struct {
		name    string
		pod     Pod
		done    bool
		errPart string
	}{
		{"pending, nothing yet", Pod{Status: PodStatus{Phase: "Pending"}}, false, ""},
		{"box running", Pod{Status: PodStatus{Phase: "Running", ContainerStatuses: []ContainerStatus{st("box", running)}}}, true, ""},
		{"creating", Pod{Status: PodStatus{ContainerStatuses: []ContainerStatus{st("box", waiting("ContainerCreating"))}}}, false, ""},
		{"image never pulled", Pod{Status: PodStatus{ContainerStatuses: []ContainerStatus{st("box", waiting("ErrImageNeverPull"))}}}, true, "ErrImageNeverPull"},
		{"init copy running", Pod{Status: PodStatus{InitStatuses: []ContainerStatus{st("watcher", running)}}}, false, ""},
		{"init copy done", Pod{Status: PodStatus{InitStatuses: []ContainerStatus{st("watcher", exited(0))}, ContainerStatuses: []ContainerStatus{st("box", waiting("PodInitializing"))}}}, false, ""},
		{"init copy failed", Pod{Status: PodStatus{InitStatuses: []ContainerStatus{st("watcher", exited(1))}}}, true, "container watcher exited"},
		{"box exited before the attach", Pod{Status: PodStatus{ContainerStatuses: []ContainerStatus{st("box", exited(243))}}}, true, "before the attach"},
		{"pod failed", Pod{Status: PodStatus{Phase: "Failed", Reason: "Evicted"}}, true, "Evicted"},
		{"being deleted", Pod{Metadata: Meta{DeletionTimestamp: &del}}, true, "being deleted"},
	} {
		done, err := runningState(&tc.pod)
		if done != tc.done || (tc.errPart == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.errPart)) {
			t.Errorf("%s: done %v err %v, want %v and %q", tc.name, done, err, tc.done, tc.errPart)
		}
	}
}
