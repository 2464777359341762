#!/usr/bin/env bash
# cluster.sh — a real single-node Kubernetes cluster for deathwatch's kernel
# tests (the kubernetes runtime's): nothing mocked, a whole control plane.
#
#   cluster.sh build          one multi-call binary (kube/main.go: kube-apiserver,
#                             kube-controller-manager, kube-scheduler, kubelet,
#                             kubectl) v1.37.2, containerd v2.4.2 and runc v1.5.3,
#                             all from the Go module proxy, into
#                             /var/cache/deathwatch-k8s/build-<id>/bin (skipped
#                             when there and their SHA256SUMS match; <id> names
#                             the versions, kube/main.go and the build settings)
#   cluster.sh up             idempotent: certificates, etcd, containerd, the
#                             apiserver, the controller manager, the scheduler,
#                             the kubelet, the base images; returns when node
#                             "localhost" is Ready and a pod ran
#   cluster.sh start          build, then up, in the background (provision.sh);
#                             the outcome in /run/deathwatch-k8s.bringup
#   cluster.sh wait [SECONDS] waits for start's bring-up (default 4800 s): exit
#                             0 when the cluster is up, 1 saying why not
#   cluster.sh down           stops everything, removes all cluster state (the
#                             build cache stays)
#   cluster.sh status         exit 0 only when up and Ready; one line
#   cluster.sh import TARBALL an image archive (kernel-tests/ktest/ociimage) into
#                             containerd's k8s.io namespace
#
# What a test (and the runtime under test) can rely on:
#   - The cluster is shared by every test and every test run on the machine:
#     a test works in a namespace of its own (ktest's TestNamespace) and never
#     stops, restarts or rebuilds the cluster (a new CA would break the
#     kubeconfigs of the tests running beside it).
#   - API server https://127.0.0.1:16443; admin kubeconfig (cluster-admin)
#     /var/lib/deathwatch-k8s/admin.kubeconfig, CA
#     /var/lib/deathwatch-k8s/pki/ca.crt; kubectl and ctr of the running build
#     at /var/cache/deathwatch-k8s/bin/{kubectl,ctr}. Everything listens on
#     127.0.0.1 only (etcd 12379/12380, kubelet 16450, its healthz 16448,
#     controller manager 16457, scheduler 16459).
#   - A controller manager and a scheduler: a new namespace gets its "default"
#     ServiceAccount and its kube-root-ca.crt ConfigMap, `kubectl delete
#     namespace` finishes, pods need not name their node (node "localhost"
#     is the only one). Pod Security admission is on (label a namespace
#     pod-security.kubernetes.io/enforce=restricted to have it enforced).
#   - RuntimeClass deathwatch-runc: containerd's handler dwrunc, runc under
#     a name of its own (runtimeClassName: deathwatch-runc selects it).
#   - Pods in user namespaces (hostUsers: false): containerd 2 and runc 1.5
#     with idmapped mounts; each pod's 65536 ids come from the kubelet's own
#     range, 2^31+2^29 … +110·65536 (/etc/subuid and /etc/subgid entries of
#     the system user kubelet, which up makes).
#   - Images (imagePullPolicy: Never; nothing is pulled):
#     localhost/deathwatch/pause:1 (the sandbox), localhost/deathwatch/busybox:1
#     (busybox-static, /bin/sh and every applet link, /etc/passwd with root
#     and nobody). More with `cluster.sh import`.
#   - Pod network: hostNetwork: false works and is what box pods should
#     use. Each pod gets its own network namespace with lo and an eth0 on a
#     macvlan in "private" mode (no pod reaches another pod) whose parent is
#     a veth pair dwk8s0/dwk8s0p with no address and no route: a pod can
#     reach nothing but itself, and the host's routes and firewall are
#     untouched (no iptables, no kube-proxy, no masquerade). Subnet
#     198.18.42.0/24, addresses from host-local IPAM. hostNetwork: true also
#     works (no CNI involved), but then the box shares the host's network.
#   - The kubelet and containerd share one mount namespace
#     (/run/deathwatch-k8s/mntns, a slave of the host's): pod mounts never
#     show on the host, and the host sysctls the kubelet would rewrite
#     (vm.overcommit_memory, kernel.panic_on_oops, ...) are masked there.
#     Pods' cgroups live under /deathwatch-k8s (cgroupfs driver; v1 and v2).
#   - Logs: /var/lib/deathwatch-k8s/log/{etcd,containerd,kube-apiserver,
#     kube-controller-manager,kube-scheduler,kubelet,up,import}.log; the
#     build's in /var/cache/deathwatch-k8s/build-<id>/build.log, the
#     background bring-up's in /var/cache/deathwatch-k8s/bringup.log.
#   - containerd socket /run/deathwatch-k8s/containerd.sock (its own root,
#     state, runc root); Docker's containerd is never touched.
#
# What it took on this kind of machine: kubelet 1.37 on cgroup v1 needs
# failCgroupV1: false; cgroupDriver: cgroupfs; restrict_oom_score_adj =
# true; the kubelet refuses a loopback node IP, so the node is named
# localhost, the kubelet binds 127.0.0.1 and the apiserver reaches it by
# hostname (--kubelet-preferred-address-types=Hostname) with a certificate
# for it; makeIPTablesUtilChains: false; this kernel has no dummy link
# driver (so the macvlan parent is a veth pair); Debian's containerd 1.6
# and runc 1.1 cannot run user-namespaced pods.
set -euo pipefail

# Go lives in /usr/local/go on these machines; root's tools in the sbin folders.
export PATH=$PATH:/usr/local/go/bin:/usr/local/sbin:/usr/sbin:/sbin

K8S_VERSION=v1.37.2
STAGING_VERSION=v0.37.2
# containerd 2 and runc 1.2 or newer run pods in user namespaces
# (hostUsers: false); Debian's containerd 1.6 and runc 1.1 do not.
CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.3
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
KUBE_MAIN=$HERE/kube/main.go
KUBE_LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
CONTAINERD_TAGS="urfave_cli_no_docs osusergo netgo static_build no_btrfs"
CACHE=/var/cache/deathwatch-k8s
# A build is named by what goes into it (the versions, kube/main.go and
# the build settings): a checkout that changes any of them builds anew
# beside the old one, which a running cluster may still use.
BUILD_ID=$({
	echo "$K8S_VERSION $STAGING_VERSION $CONTAINERD_VERSION $RUNC_VERSION $KUBE_LDFLAGS $CONTAINERD_TAGS"
	cat "$KUBE_MAIN"
} | sha256sum | cut -c1-12)
BUILD=$CACHE/build-$BUILD_ID
BIN=$BUILD/bin
BUILD_LOG=$BUILD/build.log
# $CACHE/bin links to the bin folder of the build the cluster runs (up
# sets it): kubectl for the tests is $CACHE/bin/kubectl.
CURRENT_BIN=$CACHE/bin
# The background bring-up's marker (on tmpfs: a reboot forgets it) and log.
BRINGUP=/run/deathwatch-k8s.bringup
BRINGUP_LOG=$CACHE/bringup.log
KUBE_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
RUNTIME_BINARIES=(containerd containerd-shim-runc-v2 ctr runc)
BINARIES=(kube "${KUBE_COMMANDS[@]}" "${RUNTIME_BINARIES[@]}")

# One line per step; provision.sh sets CLUSTER_SAY_WHO and CLUSTER_SAY_STEP
# so that the lines read as its own.
say() { printf '%s: %-22s %s\n' "${CLUSTER_SAY_WHO:-cluster}" "${CLUSTER_SAY_STEP:-}$1:" "$2"; }
usage() {
	echo "cluster: usage: cluster.sh build|up|down|status|start|wait [SECONDS]|import TARBALL (-h says what each does)" >&2
	exit 2
}
die() {
	printf 'cluster: FAILED: %s\n' "$1" >&2
	exit 1
}

built() {
	local b
	[ -s "$BIN/SHA256SUMS" ] || return 1
	for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
	(cd "$BIN" && sha256sum --quiet --check SHA256SUMS >/dev/null 2>&1)
}

# build_kube writes the scratch module of kube/main.go and builds the one
# multi-call binary, linked under each command's name; every step says
# when it failed (set -e does not hold in a function called with ||).
build_kube() {
	local src=$BUILD/src moddir c
	mkdir -p "$src" && cd "$src" || return 1
	moddir=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -f "$moddir/go.mod" ] || {
		echo "k8s.io/kubernetes@$K8S_VERSION was not downloaded"
		return 1
	}
	{
		echo "module deathwatch-k8s-build"
		echo
		sed -n 's/^go \(.*\)$/go \1/p' "$moddir/go.mod"
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		echo "replace ("
		# kubernetes' own go.mod points its k8s.io/* staging modules at
		# ./staging/src/...; outside its tree they are the published
		# modules of the matching version.
		sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/k8s\.io/[a-z0-9-]*$#\t\1 => \1 '"$STAGING_VERSION"'#p' "$moddir/go.mod"
		echo ")"
	} >go.mod || return 1
	cp "$KUBE_MAIN" main.go || return 1
	rm -f go.sum
	GOFLAGS=-mod=mod go mod tidy || return 1
	echo "== go build kube (${KUBE_COMMANDS[*]}) $(date -u +%T)"
	CGO_ENABLED=0 go build -p 2 -trimpath -ldflags="$KUBE_LDFLAGS" -o "$BIN/kube.new" . || return 1
	mv "$BIN/kube.new" "$BIN/kube" || return 1
	for c in "${KUBE_COMMANDS[@]}"; do ln -sfn kube "$BIN/$c" || return 1; done
}

# build_runtime builds containerd (with its shim and ctr) and runc from
# the module proxy: static containerd as its own release is built, runc
# with cgo and libseccomp (its seccomp support and its C nsexec need
# them).
build_runtime() {
	echo "== go install containerd $CONTAINERD_VERSION $(date -u +%T)"
	GOBIN=$BIN CGO_ENABLED=0 go install -trimpath -tags "$CONTAINERD_TAGS" \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" || return 1
	GOBIN=$BIN CGO_ENABLED=0 go install -trimpath -tags "$CONTAINERD_TAGS no_grpc" \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" || return 1
	echo "== go install runc $RUNC_VERSION $(date -u +%T)"
	GOBIN=$BIN CGO_ENABLED=1 go install -trimpath -tags seccomp \
		-ldflags "-s -w -X main.version=${RUNC_VERSION#v}" \
		"github.com/opencontainers/runc@$RUNC_VERSION" || return 1
}

cmd_build() {
	if built; then
		say build "ok ($K8S_VERSION, containerd $CONTAINERD_VERSION, runc $RUNC_VERSION cached in $BIN)"
		return 0
	fi
	command -v go >/dev/null || die "build: no go on PATH (install Go 1.26 or newer)"
	pkg-config --exists libseccomp 2>/dev/null || die "build: runc needs libseccomp's headers (apt-get install libseccomp-dev pkg-config)"
	mkdir -p "$BIN"
	rm -f "$BIN/SHA256SUMS"
	local t0=$SECONDS
	say build "$K8S_VERSION, containerd $CONTAINERD_VERSION, runc $RUNC_VERSION from the Go module proxy (log: $BUILD_LOG; 15-50 min, ~3 GB RAM)"
	{
		(build_runtime) && echo "== runtime done in $((SECONDS - t0)) s" && (build_kube)
	} >"$BUILD_LOG" 2>&1 || die "build: the build failed (read $BUILD_LOG)"
	echo "== done in $((SECONDS - t0)) s" >>"$BUILD_LOG"
	(cd "$BIN" && sha256sum kube "${RUNTIME_BINARIES[@]}" >SHA256SUMS)
	built || die "build: binaries missing after the build (read $BUILD_LOG)"
	say build "done in $((SECONDS - t0)) s"
}

# ---- the running cluster ---------------------------------------------------

STATE=/var/lib/deathwatch-k8s
RUN=/run/deathwatch-k8s
PKI=$STATE/pki
LOGS=$STATE/log
SOCK=$RUN/containerd.sock
MNTNS=$RUN/mntns
ADMIN=$STATE/admin.kubeconfig
APISERVER=https://127.0.0.1:16443
ETCD_CLIENT=http://127.0.0.1:12379
ETCD_PEER=http://127.0.0.1:12380
KUBELET_PORT=16450
KUBELET_HEALTHZ_PORT=16448
CONTROLLER_MANAGER_PORT=16457
SCHEDULER_PORT=16459
# The RuntimeClass up makes and the containerd handler it names.
RUNTIME_CLASS=deathwatch-runc
RUNTIME_HANDLER=dwrunc
# The daemons, in the order up starts them.
DAEMONS=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet)
# The host ids of the pods in user namespaces: 110 pods (the kubelet's
# maxPods) of 65536 ids from 2^31+2^29 up, clear of every other block on
# the host: accounts and /etc/subuid ranges below 2^30, rootful Podman's
# 2^30 … 2^30+2^28, the supervisor's id slots 2^31 … 2^31+2^28.
KUBELET_IDS_FIRST=$(((1 << 31) + (1 << 29)))
KUBELET_IDS_COUNT=$((110 * 65536))
NODE=localhost
CGROUP_ROOT=deathwatch-k8s
CNI_IF=dwk8s0
CNI_NET=deathwatch-k8s
CNI_SUBNET=198.18.42.0/24
PAUSE_IMAGE=localhost/deathwatch/pause:1
BUSYBOX_IMAGE=localhost/deathwatch/busybox:1
# Host folders the kubelet and containerd write into whether told to or not;
# inside their mount namespace each is a bind mount of a folder under
# $STATE or $RUN, so only an empty folder shows on the host, and `down`
# removes it when `up` made it.
MASKED_DIRS=(/var/log/containers /var/lib/cni /run/netns)
# The host sysctls the kubelet rewrites at start (with protectKernelDefaults
# false) and the values it wants: inside its mount namespace each
# /proc/sys entry is a file holding that value, so it reads what it wants
# and writes nothing to the host.
SYSCTLS=(vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
	kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000)

# kubectl and ctr of the build the cluster runs.
kubectl() { "$CURRENT_BIN/kubectl" --kubeconfig "$ADMIN" --request-timeout=30s "$@"; }
ctr_() { "$CURRENT_BIN/ctr" --address "$SOCK" --namespace k8s.io "$@"; }

# alive NAME: the process recorded in $RUN/NAME.pid is running the binary
# recorded beside it (a reused pid is not ours).
alive() {
	local pid exe
	pid=$(cat "$RUN/$1.pid" 2>/dev/null) || return 1
	exe=$(cat "$RUN/$1.exe" 2>/dev/null) || return 1
	[ -n "$pid" ] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ]
}

# start NAME BINARY [ARGS...]: run BINARY in its own session, detached from
# the caller, with stdout and stderr in $LOGS/NAME.log.
start() {
	local name=$1 exe
	shift
	exe=$(readlink -f "$(command -v "$1")")
	setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null 8>&- &
	echo $! >"$RUN/$name.pid"
	echo "$exe" >"$RUN/$name.exe"
}

# start_in_ns NAME BINARY [ARGS...]: the same, inside the cluster's mount
# namespace.
start_in_ns() {
	local name=$1 exe
	shift
	exe=$(readlink -f "$(command -v "$1")")
	# The path as given: the multi-call binary reads its command from it.
	setsid nsenter --mount="$MNTNS" -- "$(command -v "$1")" "${@:2}" >>"$LOGS/$name.log" 2>&1 </dev/null 8>&- &
	echo $! >"$RUN/$name.pid"
	echo "$exe" >"$RUN/$name.exe"
}

# wait_for STEP PROC SECONDS LOG COMMAND...: poll COMMAND once a second
# until it succeeds; fail naming the step and its log after SECONDS (by
# the clock), or as soon as the process PROC (a name for alive) is gone.
wait_for() {
	local step=$1 proc=$2 limit=$3 log=$4 deadline
	shift 4
	deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		alive "$proc" || die "up: $proc exited before $step was ready (read $log)"
		[ "$SECONDS" -lt "$deadline" ] || die "up: $step not ready after ${limit}s (read $log)"
		sleep 1
	done
}

# stop NAME: SIGTERM, up to 30 s, then SIGKILL.
stop() {
	local pid i
	alive "$1" || {
		rm -f "$RUN/$1.pid" "$RUN/$1.exe"
		return 0
	}
	pid=$(cat "$RUN/$1.pid")
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 300); do
		alive "$1" || break
		sleep 0.1
	done
	if alive "$1"; then kill -KILL "$pid" 2>/dev/null || true; fi
	for i in $(seq 100); do
		alive "$1" || break
		sleep 0.1
	done
	alive "$1" && die "down: $1 (pid $pid) does not die"
	rm -f "$RUN/$1.pid" "$RUN/$1.exe"
}

cert() { # cert NAME SUBJECT [SAN]: a key and a certificate signed by the CA
	local name=$1 subj=$2 san=${3:-}
	[ -s "$PKI/$name.crt" ] && return 0
	openssl genrsa -out "$PKI/$name.key" 2048
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr"
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		if [ -n "$san" ]; then
			echo "extendedKeyUsage=serverAuth,clientAuth"
			echo "subjectAltName=$san"
		else
			echo "extendedKeyUsage=clientAuth"
		fi
	} >"$PKI/$name.ext"
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt"
	rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

kubeconfig() { # kubeconfig FILE CERT-NAME
	cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: deathwatch
  cluster:
    server: $APISERVER
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: deathwatch
  context: {cluster: deathwatch, user: $2}
current-context: deathwatch
KC
}

make_pki() {
	mkdir -p "$PKI"
	chmod 700 "$PKI"
	if [ ! -s "$PKI/ca.crt" ]; then
		openssl genrsa -out "$PKI/ca.key" 2048
		openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=deathwatch-k8s-ca" -days 3650 -sha256 -out "$PKI/ca.crt"
	fi
	cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
	cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
	cert admin "/O=system:masters/CN=deathwatch-admin"
	cert kubelet-client "/O=system:nodes/CN=system:node:$NODE"
	cert kubelet "/CN=$NODE" "DNS:$NODE,IP:127.0.0.1"
	cert controller-manager "/CN=system:kube-controller-manager"
	cert scheduler "/CN=system:kube-scheduler"
	if [ ! -s "$PKI/sa.key" ]; then
		openssl genrsa -out "$PKI/sa.key" 2048
		openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
	fi
	kubeconfig "$ADMIN" admin
	kubeconfig "$STATE/kubelet.kubeconfig" kubelet-client
	kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
	kubeconfig "$STATE/scheduler.kubeconfig" scheduler
}

write_configs() {
	mkdir -p "$STATE/cni/net.d"
	cat >"$STATE/cni/net.d/10-$CNI_NET.conflist" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NET",
  "plugins": [
    {
      "type": "macvlan",
      "master": "$CNI_IF",
      "mode": "private",
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$CNI_SUBNET"}]],
        "dataDir": "$STATE/cni/ipam"
      }
    }
  ]
}
CNI
	cat >"$STATE/containerd.toml" <<TOML
# containerd for the deathwatch test cluster; never Docker's.
version = 3
root = "$STATE/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$RUN/containerd-ttrpc.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$BIN/runc"
        Root = "$RUN/runc"
        SystemdCgroup = false
    # A second handler (RuntimeClass $RUNTIME_CLASS): runc again, under
    # a name of its own, for runtimeClassName to select.
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.$RUNTIME_HANDLER]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.$RUNTIME_HANDLER.options]
        BinaryName = "$BIN/runc"
        Root = "$RUN/runc-$RUNTIME_HANDLER"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$STATE/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
TOML
	cat >"$STATE/kubelet.yaml" <<KUBELET
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_ROOT
# kubelet 1.37 refuses cgroup v1 hosts unless told.
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
protectKernelDefaults: false
podLogsDir: $STATE/pod-logs
# Imported images (imagePullPolicy: Never) must not be collected.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
serializeImagePulls: false
KUBELET
}

# The mount namespace containerd and the kubelet share: every mount under
# it is a slave of the host's, so what they mount (pod volumes, container
# root file systems, network namespaces) never shows on the host and goes
# away with the namespace.
make_mntns() {
	local d s name value
	mountpoint -q "$MNTNS" && return 0
	# unshare can keep a namespace only on a private mount.
	if ! mountpoint -q "$RUN"; then
		mount --bind "$RUN" "$RUN"
	fi
	mount --make-private "$RUN"
	touch "$MNTNS"
	for d in "${MASKED_DIRS[@]}"; do
		if [ ! -e "$d" ]; then
			mkdir -p "$d"
			echo "$d" >>"$STATE/created-dirs"
		fi
		mkdir -p "$STATE/masked$d"
	done
	mkdir -p "$STATE/masked/sysctl"
	for s in "${SYSCTLS[@]}"; do
		name=${s%%=*} value=${s#*=}
		echo "$value" >"$STATE/masked/sysctl/${name//\//.}"
	done
	mkdir -p "$RUN/proc"
	unshare --mount="$MNTNS" --propagation slave true
	# The kernel lets a user namespace (a pod's, hostUsers: false) mount a
	# proc only where a proc is already fully visible, nothing mounted over
	# a file of it: /proc with the sysctls masked is not, so a plain proc
	# at $RUN/proc is there for that check (no pod sees it).
	nsenter --mount="$MNTNS" -- sh -ec '
		for d in '"${MASKED_DIRS[*]}"'; do mount --bind "'"$STATE"'/masked$d" "$d"; done
		for s in '"${SYSCTLS[*]}"'; do
			n=${s%%=*}
			mount --bind "'"$STATE"'/masked/sysctl/$(echo "$n" | tr / .)" "/proc/sys/$n"
		done
		mount -t proc -o nosuid,nodev,noexec proc "'"$RUN"'/proc"'
}

make_rootfs_busybox() { # make_rootfs_busybox DIR
	local dir=$1 p
	rm -rf "$dir"
	mkdir -p "$dir/bin" "$dir/sbin" "$dir/usr/bin" "$dir/usr/sbin" "$dir/etc" "$dir/tmp" "$dir/root"
	chmod 1777 "$dir/tmp"
	cp /bin/busybox "$dir/bin/busybox"
	for p in $("$dir/bin/busybox" --list-full); do
		[ -e "$dir/$p" ] || ln -s /bin/busybox "$dir/$p"
	done
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$dir/etc/passwd"
	printf 'root:x:0:\nnobody:x:65534:\n' >"$dir/etc/group"
}

# Build the pause program and mkimage, and import the base images.
import_base_images() {
	local tools=$CACHE/tools tmp
	mkdir -p "$tools"
	(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -buildid=" -o "$tools/pause" ./kernel-tests/k8s/pause &&
		CGO_ENABLED=0 go build -trimpath -o "$tools/mkimage" ./kernel-tests/k8s/mkimage) ||
		die "up: building kernel-tests/k8s/pause and mkimage failed (output above)"
	tmp=$(mktemp -d /tmp/deathwatch-k8s-images.XXXXXX)
	mkdir -p "$tmp/pause"
	cp "$tools/pause" "$tmp/pause/pause"
	"$tools/mkimage" -ref "$PAUSE_IMAGE" -rootfs "$tmp/pause" -entrypoint /pause -o "$tmp/pause.tar"
	make_rootfs_busybox "$tmp/busybox"
	"$tools/mkimage" -ref "$BUSYBOX_IMAGE" -rootfs "$tmp/busybox" -cmd /bin/sh -o "$tmp/busybox.tar"
	cmd_import "$tmp/pause.tar" && cmd_import "$tmp/busybox.tar"
	rm -rf "$tmp"
}

cmd_import() {
	[ -f "${1:-}" ] || die "import: no image archive '${1:-}' (usage: cluster.sh import TARBALL)"
	[ -S "$SOCK" ] || die "import: the cluster's containerd is not running (run cluster.sh up)"
	ctr_ images import "$1" >>"$LOGS/import.log" 2>&1 || die "import: ctr images import $1 failed (read $LOGS/import.log)"
}

node_ready() {
	[ "$(kubectl get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# A pod that must run to completion for `up` to count: the busybox image
# on the pod network, in a user namespace, placed by the scheduler.
smoke_pod() {
	kubectl delete pod deathwatch-k8s-smoke --ignore-not-found --grace-period=0 --force >/dev/null 2>&1 || true
	kubectl apply -f - >>"$LOGS/up.log" 2>&1 <<POD || die "up: kubectl apply of the smoke pod failed (read $LOGS/up.log)"
apiVersion: v1
kind: Pod
metadata: {name: deathwatch-k8s-smoke, namespace: default}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  hostUsers: false
  containers:
  - name: smoke
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [/bin/sh, -c, "ip addr show eth0 >/dev/null && echo ok"]
POD
	wait_for "the smoke pod (kubectl get pod deathwatch-k8s-smoke)" kubelet 180 "$LOGS/kubelet.log" \
		sh -c "[ \"\$('$CURRENT_BIN/kubectl' --kubeconfig '$ADMIN' get pod deathwatch-k8s-smoke -o 'jsonpath={.status.phase}')\" = Succeeded ]"
	kubectl delete pod deathwatch-k8s-smoke --grace-period=0 --force >/dev/null 2>&1 || true
}

# kubelet_ids gives the kubelet a range of host ids of its own for the
# pods in user namespaces (hostUsers: false): it reads the subordinate ids
# of a user named kubelet (getsubids); without one it would hand out ids
# from 65536 up, where accounts and the rootless engines' ranges live.
# provision.sh leaves this range out when it places the test users'.
kubelet_ids() {
	local f line=kubelet:$KUBELET_IDS_FIRST:$KUBELET_IDS_COUNT
	command -v getsubids >/dev/null || die "up: getsubids missing (apt-get install uidmap): the kubelet needs it for the pods' user namespaces"
	id -u kubelet >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kubelet ||
		die "up: cannot create the system user kubelet (the owner of the pods' host id range)"
	for f in /etc/subuid /etc/subgid; do
		if grep -q '^kubelet:' "$f" 2>/dev/null; then
			grep -qx "$line" "$f" || die "up: $f gives kubelet another range than $line (fix or remove that line)"
		else
			echo "$line" >>"$f" || die "up: cannot add $line to $f"
		fi
	done
}

# any_alive: some daemon of the cluster runs.
any_alive() {
	local c
	for c in "${DAEMONS[@]}"; do alive "$c" && return 0; done
	return 1
}

cmd_up() {
	local t0=$SECONDS
	built || die "up: no binaries in $BIN (run cluster.sh build first)"
	if cmd_status >/dev/null 2>&1; then
		if [ "$(readlink "$CURRENT_BIN")" = "$BIN" ]; then
			say up "ok (already up: node $NODE Ready, API $APISERVER)"
		else
			say up "ok (already up, from $(readlink "$CURRENT_BIN"); this checkout's build is $BIN: cluster.sh down, then up, switches)"
		fi
		return 0
	fi
	if any_alive; then
		# Part of a cluster runs: the rest must come from the same build.
		[ "$(readlink "$CURRENT_BIN" 2>/dev/null)" = "$BIN" ] ||
			die "up: part of the cluster runs, from another build than $BIN (run cluster.sh down, then up)"
	else
		ln -sfn "$BIN" "$CURRENT_BIN.new" && mv -T "$CURRENT_BIN.new" "$CURRENT_BIN" || die "up: cannot link $CURRENT_BIN to $BIN"
	fi
	# containerd runs its shim (containerd-shim-runc-v2) found on PATH.
	export PATH=$BIN:$PATH
	for p in etcd openssl nsenter unshare curl; do
		command -v "$p" >/dev/null || die "up: $p missing (apt-get install etcd-server containernetworking-plugins openssl util-linux curl)"
	done
	[ -x /usr/lib/cni/macvlan ] || die "up: CNI plugins missing (apt-get install containernetworking-plugins)"
	kubelet_ids
	mkdir -p "$STATE" "$RUN" "$LOGS"
	chmod 700 "$STATE"
	make_pki >>"$LOGS/up.log" 2>&1 || die "up: certificates (read $LOGS/up.log)"
	write_configs
	if ! ip link show "$CNI_IF" >/dev/null 2>&1; then
		# A veth pair with no address and no route: the macvlan parent
		# (this kernel has no dummy driver); what a pod sends goes nowhere.
		ip link add "$CNI_IF" type veth peer name "${CNI_IF}p" && ip link set "${CNI_IF}p" up && ip link set "$CNI_IF" up ||
			die "up: cannot create the veth pair $CNI_IF (the pods' network parent)"
	fi
	make_mntns >>"$LOGS/up.log" 2>&1 || die "up: the mount namespace $MNTNS (read $LOGS/up.log)"

	if ! alive etcd; then
		start etcd etcd --name deathwatch --data-dir "$STATE/etcd" \
			--listen-client-urls "$ETCD_CLIENT" --advertise-client-urls "$ETCD_CLIENT" \
			--listen-peer-urls "$ETCD_PEER" --initial-advertise-peer-urls "$ETCD_PEER" \
			--initial-cluster "deathwatch=$ETCD_PEER"
	fi
	wait_for etcd etcd 60 "$LOGS/etcd.log" curl -sf "$ETCD_CLIENT/health"

	if ! alive containerd; then
		start_in_ns containerd "$BIN/containerd" --config "$STATE/containerd.toml"
	fi
	wait_for containerd containerd 60 "$LOGS/containerd.log" "$BIN/ctr" --address "$SOCK" version

	if ! alive kube-apiserver; then
		start kube-apiserver "$BIN/kube-apiserver" \
			--advertise-address=127.0.0.1 --bind-address=127.0.0.1 --secure-port=16443 \
			--etcd-servers="$ETCD_CLIENT" --cert-dir="$STATE/apiserver" \
			--client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
			--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
			--kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=Hostname \
			--service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$PKI/sa.pub" \
			--service-account-signing-key-file="$PKI/sa.key" --service-cluster-ip-range=10.96.0.0/24 \
			--endpoint-reconciler-type=none \
			--authorization-mode=Node,RBAC --allow-privileged=true --anonymous-auth=false --profiling=false
	fi
	wait_for kube-apiserver kube-apiserver 300 "$LOGS/kube-apiserver.log" kubectl get --raw /readyz

	# The controllers (namespaces' service accounts and kube-root-ca.crt,
	# namespace deletion, garbage collection) and the scheduler; one of
	# each, so no leader election.
	if ! alive kube-controller-manager; then
		start kube-controller-manager "$BIN/kube-controller-manager" \
			--kubeconfig="$STATE/controller-manager.kubeconfig" \
			--authentication-kubeconfig="$STATE/controller-manager.kubeconfig" \
			--authorization-kubeconfig="$STATE/controller-manager.kubeconfig" \
			--bind-address=127.0.0.1 --secure-port="$CONTROLLER_MANAGER_PORT" --cert-dir="$STATE/controller-manager" \
			--leader-elect=false --use-service-account-credentials=true \
			--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
			--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
			--service-cluster-ip-range=10.96.0.0/24 --profiling=false
	fi
	if ! alive kube-scheduler; then
		start kube-scheduler "$BIN/kube-scheduler" \
			--kubeconfig="$STATE/scheduler.kubeconfig" \
			--authentication-kubeconfig="$STATE/scheduler.kubeconfig" \
			--authorization-kubeconfig="$STATE/scheduler.kubeconfig" \
			--bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --cert-dir="$STATE/scheduler" \
			--leader-elect=false --profiling=false
	fi
	wait_for kube-controller-manager kube-controller-manager 300 "$LOGS/kube-controller-manager.log" \
		curl -sfk "https://127.0.0.1:$CONTROLLER_MANAGER_PORT/healthz"
	wait_for kube-scheduler kube-scheduler 300 "$LOGS/kube-scheduler.log" curl -sfk "https://127.0.0.1:$SCHEDULER_PORT/healthz"

	import_base_images

	# The kubelet wants its cgroupRoot made in every hierarchy (v1's
	# controllers and named ones, v2's unified tree); down removes them.
	for d in $(findmnt -rn -t cgroup,cgroup2 -o TARGET); do
		mkdir -p "$d/$CGROUP_ROOT" || die "up: cannot make the cgroup $d/$CGROUP_ROOT"
	done
	if ! alive kubelet; then
		start_in_ns kubelet "$BIN/kubelet" --config="$STATE/kubelet.yaml" --kubeconfig="$STATE/kubelet.kubeconfig" \
			--hostname-override="$NODE" --root-dir="$STATE/kubelet" --cert-dir="$STATE/kubelet/pki"
	fi
	wait_for "node $NODE Ready" kubelet 300 "$LOGS/kubelet.log" node_ready
	# The ServiceAccount admission refuses pods until the controller
	# manager has made the namespace's "default" service account.
	wait_for "the default service account" kube-controller-manager 120 "$LOGS/kube-controller-manager.log" \
		kubectl get serviceaccount default
	kubectl apply -f - >>"$LOGS/up.log" 2>&1 <<RC || die "up: kubectl apply of the RuntimeClass $RUNTIME_CLASS failed (read $LOGS/up.log)"
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: $RUNTIME_CLASS}
handler: $RUNTIME_HANDLER
RC
	smoke_pod
	say up "node $NODE Ready, API $APISERVER, kubeconfig $ADMIN ($((SECONDS - t0)) s)"
}

cmd_status() {
	local c
	for c in "${DAEMONS[@]}"; do
		if ! alive "$c"; then
			say status "down: $c is not running"
			return 1
		fi
	done
	if ! node_ready 2>/dev/null; then
		say status "down: node $NODE is not Ready (read $LOGS/kubelet.log)"
		return 1
	fi
	say status "up: node $NODE Ready, API $APISERVER, kubeconfig $ADMIN"
}

# down: stop everything and remove every trace; the build cache stays.
cmd_down() {
	local i id pid d cg
	if alive kube-apiserver && alive kubelet; then
		# Let the kubelet stop the pods the ordinary way (their network
		# torn down by CNI, their sandboxes stopped).
		kubectl delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1 || true
		for i in $(seq 60); do
			[ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && break
			sleep 1
		done
	fi
	stop kubelet
	stop kube-scheduler
	stop kube-controller-manager
	if [ -S "$SOCK" ] && alive containerd; then
		for id in $(ctr_ tasks ls -q 2>/dev/null); do
			ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		sleep 1
		for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true; done
	fi
	stop kube-apiserver
	stop containerd
	# The shims outlive containerd by design; ours name our socket (so does
	# grep's own command line: only shims are killed).
	for pid in $(grep -lz -- "$SOCK" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
		case $(readlink "/proc/$pid/exe" 2>/dev/null) in
		*/containerd-shim*) kill -KILL "$pid" 2>/dev/null || true ;;
		esac
	done
	stop etcd
	# The pods' cgroups (all hierarchies, v1 and v2): kill what is left,
	# then remove them deepest first.
	for cg in $(find /sys/fs/cgroup -maxdepth 2 -type d -name "$CGROUP_ROOT" 2>/dev/null); do
		for i in $(seq 50); do
			find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
			find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
			[ -d "$cg" ] || break
			sleep 0.2
		done
		[ -d "$cg" ] && die "down: cannot remove the cgroup $cg"
	done
	if mountpoint -q "$MNTNS" 2>/dev/null; then umount "$MNTNS"; fi
	# Anything mounted under the state folders (none is expected: the pods'
	# mounts live in the namespace).
	for d in $(findmnt -rn -o TARGET | grep -E "^($STATE|$RUN)(/|$)" | sort -r || true); do
		umount -l "$d" || true
	done
	if [ -f "$STATE/created-dirs" ]; then
		while read -r d; do rmdir "$d" 2>/dev/null || true; done <"$STATE/created-dirs"
	fi
	if ip link show "$CNI_IF" >/dev/null 2>&1; then ip link del "$CNI_IF"; fi
	rm -rf "$STATE" "$RUN"
	bringup_running || rm -f "$BRINGUP"
	say down "stopped; $STATE and $RUN removed (the build cache $CACHE stays)"
}

# ---- the bring-up in the background ------------------------------------

# start runs build and up in the background, detached from the caller
# (provision.sh, so that make test's other lanes run meanwhile); the
# marker $BRINGUP says how it goes: "starting", "running PID", "ready" or
# "failed: ...". wait reads it.

bringup_running() {
	local state pid
	read -r state pid 2>/dev/null <"$BRINGUP" || return 1
	case $state in
	starting) return 0 ;;
	running) [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null ;;
	*) return 1 ;;
	esac
}

mark() { echo "$1" >"$BRINGUP.new" && mv "$BRINGUP.new" "$BRINGUP"; }

cmd_start() {
	if built && [ "$(readlink "$CURRENT_BIN" 2>/dev/null)" = "$BIN" ] && cmd_status >/dev/null 2>&1; then
		mark ready
		say start "ok (already up, from $BIN)"
		return 0
	fi
	if bringup_running; then
		say start "already under way ($(cat "$BRINGUP"); log $BRINGUP_LOG)"
		return 0
	fi
	mark starting
	setsid bash "$HERE/cluster.sh" bringup </dev/null >"$BRINGUP_LOG" 2>&1 8>&- 9>&- &
	say start "build and up in the background (log $BRINGUP_LOG; cluster.sh wait waits for it)"
}

cmd_bringup() {
	mark "running $$"
	if bash "$HERE/cluster.sh" build && bash "$HERE/cluster.sh" up; then
		mark ready
	else
		mark "failed: cluster.sh build or up failed (read $BRINGUP_LOG)"
	fi
}

# wait [SECONDS]: until the background bring-up ends (default 4800 s);
# exit 0 when the cluster is up, 1 saying why not.
cmd_wait() {
	local limit=${1:-4800} deadline state
	deadline=$((SECONDS + limit))
	while :; do
		state=$(cat "$BRINGUP" 2>/dev/null || true)
		case $state in
		ready | "")
			# A node that misses a heartbeat on a loaded machine is
			# NotReady for a moment: ask again for up to a minute.
			for _ in $(seq 30); do
				cmd_status >/dev/null 2>&1 && return 0
				[ -n "$state" ] || break
				sleep 2
			done
			[ -z "$state" ] && die "wait: the cluster is down and no bring-up is under way (run kernel-tests/provision.sh, or cluster.sh start)"
			die "wait: the bring-up finished but the cluster is down: $(cmd_status 2>&1 | tail -1)"
			;;
		failed*) die "wait: the bring-up $state; its end: $(tail -5 "$BRINGUP_LOG" 2>/dev/null | tr '\n' ' ')" ;;
		esac
		bringup_running || die "wait: the bring-up ($state) died without a word (read $BRINGUP_LOG)"
		[ "$SECONDS" -lt "$deadline" ] || die "wait: the bring-up ($state) still runs after ${limit}s (read $BRINGUP_LOG)"
		sleep 2
	done
}

# Two test runs may call these at once: build takes turns with builds of
# the same build, up and down with each other (a build can take most of
# an hour; a running cluster's up must not wait for it). The lock is on
# fd 8, which the daemons must not inherit (start closes it).
lock() {
	mkdir -p "$CACHE"
	exec 8>"$1"
	flock 8
}

case "${1:-}" in
build) lock "$BUILD.lock" ;;
up | down) lock "$CACHE/lock" ;;
start) lock "$CACHE/start.lock" ;;
esac
case "${1:-}" in
build) cmd_build ;;
start) cmd_start ;;
bringup) cmd_bringup ;;
wait)
	[ $# -le 2 ] || usage
	cmd_wait "${2:-}"
	;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
import)
	[ $# -eq 2 ] || usage
	cmd_import "$2"
	;;
-h | --help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' ;;
*) usage ;;
esac
