#!/usr/bin/env bash
# provision.sh — make this machine able to run deathwatch's kernel tests.
#
# Runs as root on a Debian 12 machine (a fresh one needs only the Debian
# package mirror). Idempotent, and quick when everything is already in place:
# it installs only missing packages, starts dockerd only when `docker info`
# fails, and rewrites configuration only when it differs. One line per step;
# exits non-zero with a message saying what to do when a step cannot be made
# to work.
#
# What it sets up (kernel-tests/ktest/images.go and the engine runtimes rely
# on exactly this):
#   - Debian packages: docker.io podman runc uidmap busybox-static tini
#     bubblewrap catatonit dumb-init hyperfine iproute2 procps util-linux
#     (+ netavark aardvark-dns iptables for rootful Podman's bridge network;
#     etcd-server containernetworking-plugins openssl curl libseccomp-dev
#     pkg-config for the Kubernetes test cluster, whose containerd and runc
#     are built from the Go module proxy; python3 for the README's Python
#     controller, which TestReadmeExamples runs).
#   - dockerd running (started by hand when there is no systemd), log in
#     /var/log/dockerd.log.
#   - Podman (rootful and rootless): the runc runtime (crun refuses cgroup v1
#     hybrid), cgroupfs cgroup manager, file events logger, and
#     default_ulimits below this machine's hard limits (Podman's defaults
#     exceed them and runc then fails with "error setting rlimits").
#     System-wide in /etc/containers/containers.conf.d/50-deathwatch.conf.
#   - The unprivileged user dwtest (uid 2345) with /etc/subuid and
#     /etc/subgid ranges, a runtime dir /run/user/2345 (tmpfs, as logind
#     would make it), and its own containers.conf (runc, cgroupfs) and
#     storage.conf (native overlay, runroot pinned under /run/user/2345).
#   - Rootless Docker for a user of its own, dwdocker (uid 2346, its own
#     /etc/subuid and /etc/subgid range): rootlesskit and slirp4netns from
#     Debian, Debian's dockerd-rootless.sh (/usr/share/docker.io/contrib),
#     the runtime dir /run/user/2346 (tmpfs), the daemon started as that
#     user in the background, log in /var/log/dockerd-rootless.log, its
#     socket /run/user/2346/docker.sock (DOCKER_HOST for that user).
#     `provision.sh --rootless-docker` provisions (and restarts) this piece
#     alone, under a lock of its own.
#   - What udev and systemd do on an ordinary machine and this one lacks:
#     / made a shared mount (else rootless Podman warns on every command),
#     tracefs on /sys/kernel/tracing (make bench's kill trace),
#     /dev/net/tun mode 0666 (else slirp4netns, rootless Podman's network,
#     fails; runs with --network none work either way).
#
# provision.sh --reset takes the machine back to "never provisioned" for
# every piece that can be reset safely, so that the first-run paths (the
# ones a machine that already ran the suite hides) can be run again:
# dockerd stopped, the test images and the provisioning probe gone,
# rootful Podman's whole state (storage, networks, its network-backend
# choice) reset, the containers.conf.d drop-in removed, the test user, its
# home, runtime dir, rootless storage and sub-ids removed (the same for
# the rootless Docker user, its daemon stopped first), the kernel
# tests' busybox root folders removed. The Debian packages stay installed
# (removing them is neither safe nor quick); so do / as a shared mount and
# /dev/net/tun's mode (what udev and systemd do on an ordinary machine).
# `make test-fresh` resets, then runs `make test` twice.
#
#   - The VM rig's guests (kernel-tests/vm/vm.sh build, with
#     qemu-system-x86 debootstrap e2fsprogs cpio xz-utils kmod from
#     Debian): Debian's 6.1 and 5.10 kernels and a bookworm root image in
#     /var/cache/deathwatch-vm (a fresh machine pays a few minutes), kept
#     while its recipe is unchanged. --reset removes it.
#   - The single-node Kubernetes test cluster (kernel-tests/k8s/cluster.sh
#     start: build, then up, in the background, as soon as the packages are
#     in): built once into /var/cache/deathwatch-k8s (a fresh machine pays
#     15-50 min), started in a minute after that. provision.sh does not wait
#     for it: make test's kubernetes lane does (cluster.sh wait), while the
#     other lanes run. --reset runs cluster.sh down (the build cache stays)
#     and removes the kubelet's user and id range.
#
# Rootless Podman is then used as:
#   cd / && runuser -u dwtest -- env XDG_RUNTIME_DIR=/run/user/2345 podman run --network none ...
# (the working directory must be one dwtest can enter).

set -euo pipefail

# The rootless test user; the overrides exist only to test this script
# itself without touching dwtest (kernel-tests/ktest/images.go expects dwtest).
DW_USER=${PROVISION_USER:-dwtest}
DW_UID=${PROVISION_UID:-2345}
DW_RUNDIR=/run/user/$DW_UID
DOCKERD_LOG=/var/log/dockerd.log
MARK="# managed by deathwatch kernel-tests/provision.sh; rewritten on every run"
# The rootless Docker test user (kernel-tests/ktest/images.go expects it).
DD_USER=dwdocker
DD_UID=2346
DD_RUNDIR=/run/user/$DD_UID
DD_LOG=/var/log/dockerd-rootless.log
DD_SCRIPT=/usr/share/docker.io/contrib/dockerd-rootless.sh
PACKAGES=(docker.io podman runc uidmap busybox-static tini bubblewrap catatonit
	dumb-init hyperfine iproute2 procps util-linux netavark aardvark-dns iptables
	rootlesskit slirp4netns
	etcd-server containernetworking-plugins openssl curl libseccomp-dev pkg-config
	qemu-system-x86 debootstrap e2fsprogs cpio xz-utils kmod python3)
PROBE=deathwatch-provision:probe

step() { printf 'provision: %-22s %s\n' "$1:" "$2"; }
# Data comes from a tool's stdout only; its stderr (warnings, first-run
# notices, locale complaints) goes to this log and is shown only when the
# step fails.
ERRLOG=$(mktemp /tmp/provision-stderr.XXXXXX)
trap 'rm -f "$ERRLOG"' EXIT
errtail() { [ -s "$ERRLOG" ] && printf ' (stderr: %s)' "$(tail -5 "$ERRLOG" | tr '\n' ' ')"; }
die() {
	printf 'provision: FAILED: %s\n' "$1" >&2
	exit 1
}

RESET=
ONLY=
case "${1:-}" in
"") ;;
--reset) RESET=1 ;;
--rootless-docker) ONLY=rootless-docker ;;
-h | --help)
	sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
*)
	echo "provision: unknown argument '$1'; run '$0' to provision or '$0 --reset' to undo it ('$0 --rootless-docker' provisions rootless Docker alone)" >&2
	exit 2
	;;
esac

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages, starts dockerd and creates the user $DW_USER); run: sudo $0"
[ -r /etc/debian_version ] || die "this script provisions Debian (12); install the packages listed at its top by hand on other systems"
export DEBIAN_FRONTEND=noninteractive
# Tools print their data in the C locale whatever the machine's is.
export LC_ALL=C
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
# One provisioning at a time (parallel `make test` runs would race to start
# dockerd). --rootless-docker touches only its user's pieces, which
# rootless_docker_up guards with a lock of their own: a test restarting
# that daemon need not wait for a whole provisioning.
if [ "$ONLY" != rootless-docker ]; then
	exec 9>/run/deathwatch-provision.lock
	flock 9
fi

# ------------------------------------------------------- rootless docker
# as_dd runs a command as the rootless Docker user, from /, with the
# environment that user's shell would have (DOCKER_HOST names its daemon).
as_dd() {
	(cd / && runuser -u "$DD_USER" -- env -i PATH="$PATH" HOME="$(getent passwd "$DD_USER" | cut -d: -f6)" \
		USER="$DD_USER" XDG_RUNTIME_DIR="$DD_RUNDIR" DOCKER_HOST="unix://$DD_RUNDIR/docker.sock" LC_ALL=C "$@" 9>&- 8>&-)
}

# dd_answers: the user's daemon answers and says it is rootless.
dd_answers() {
	as_dd docker info --format '{{json .SecurityOptions}}' 2>/dev/null | grep -q 'name=rootless'
}

# rootless_docker_reset stops the user's daemon and removes the user, its
# home (the daemon's images and boxes), runtime dir and sub-ids.
rootless_docker_reset() {
	if getent passwd "$DD_USER" >/dev/null; then
		home=$(getent passwd "$DD_USER" | cut -d: -f6)
		# rootlesskit ends dockerd and the boxes' shims with it.
		pkill -TERM -u "$DD_UID" -x rootlesskit 2>/dev/null || true
		for _ in $(seq 1 40); do pgrep -u "$DD_UID" >/dev/null || break; sleep 0.25; done
		pkill -KILL -u "$DD_UID" 2>/dev/null || true
		sleep 0.2
		userdel "$DD_USER" >/dev/null 2>&1 || true
		rm -rf "$home"
		step "reset docker rootless" "stopped its daemon, removed $DD_USER and its home"
	fi
	getent group "$DD_USER" >/dev/null && groupdel "$DD_USER" >/dev/null 2>&1
	mountpoint -q "$DD_RUNDIR" && umount -l "$DD_RUNDIR"
	rm -rf "$DD_RUNDIR"
	for f in /etc/subuid /etc/subgid; do
		[ -f "$f" ] && sed -i -e "/^$DD_USER:/d" "$f"
	done
	return 0
}

# rootless_docker_up makes the user, its sub-ids and runtime dir, and
# starts its daemon when it does not answer.
rootless_docker_up() {
	exec 8>/run/deathwatch-provision-docker-rootless.lock
	flock 8
	[ -x "$DD_SCRIPT" ] || die "$DD_SCRIPT is missing; Debian's docker.io ships it (apt-get install --reinstall docker.io)"
	for c in rootlesskit slirp4netns newuidmap; do
		command -v "$c" >/dev/null || die "command $c is missing; apt-get install rootlesskit slirp4netns uidmap"
	done
	if ! getent passwd "$DD_USER" >/dev/null; then
		useradd --uid "$DD_UID" --user-group --create-home --shell /bin/sh "$DD_USER" ||
			die "useradd $DD_USER (uid $DD_UID) failed; is uid $DD_UID taken? (getent passwd $DD_UID)"
		step "docker rootless user" "created $DD_USER (uid $DD_UID)"
	else
		[ "$(id -u "$DD_USER")" = "$DD_UID" ] || die "user $DD_USER exists with uid $(id -u "$DD_USER"), expected $DD_UID; remove it (userdel -r $DD_USER) and run again"
		step "docker rootless user" "ok ($DD_USER uid $DD_UID)"
	fi
	local f start added=
	for f in /etc/subuid /etc/subgid; do
		touch "$f"
		grep -q "^$DD_USER:" "$f" && continue
		# The first 65536 ids after every user's range (podman's pool for
		# --userns=auto, "containers", lies far above and is not a user's).
		start=$(awk -F: 'BEGIN{m=100000} $1!="containers" && $1!="kubelet" {e=$2+$3; if (e>m) m=e} END{print m}' "$f")
		echo "$DD_USER:$start:65536" >>"$f"
		added=added
	done
	step "docker rootless ids" "${added:-ok} ($(grep "^$DD_USER:" /etc/subuid | head -1) / $(grep "^$DD_USER:" /etc/subgid | head -1))"
	if ! mountpoint -q "$DD_RUNDIR"; then
		mkdir -p "$DD_RUNDIR"
		mount -t tmpfs -o "mode=0700,uid=$DD_UID,gid=$DD_UID,size=256m" tmpfs "$DD_RUNDIR" ||
			die "mount a tmpfs on $DD_RUNDIR failed"
		step "docker rootless dir" "mounted tmpfs $DD_RUNDIR"
	fi
	if dd_answers; then
		step "docker rootless" "ok (already running, DOCKER_HOST=unix://$DD_RUNDIR/docker.sock)"
		return 0
	fi
	if pgrep -u "$DD_UID" -x rootlesskit >/dev/null; then
		step "docker rootless" "running (pid $(pgrep -u "$DD_UID" -x rootlesskit | tr '\n' ' ')) but not answering yet; waiting"
	else
		# No systemd user session here: started by hand, detached from
		# our session so that it outlives this script and the test run.
		# 9>&-: the daemon must not inherit (and hold forever) our lock.
		setsid -f runuser -u "$DD_USER" -- env -i PATH="/usr/share/docker.io/contrib:$PATH" \
			HOME="$(getent passwd "$DD_USER" | cut -d: -f6)" USER="$DD_USER" XDG_RUNTIME_DIR="$DD_RUNDIR" \
			"$DD_SCRIPT" >>"$DD_LOG" 2>&1 </dev/null 9>&- 8>&-
		step "docker rootless" "started (log $DD_LOG); waiting for docker info as $DD_USER"
	fi
	# Waited for by the clock, as rootful dockerd above.
	local ok= end=$((SECONDS + 120))
	while [ $SECONDS -lt $end ]; do
		if dd_answers; then
			ok=1
			break
		fi
		sleep 0.5
		pgrep -u "$DD_UID" -x rootlesskit >/dev/null || break
	done
	if [ -z "$ok" ]; then
		tail -20 "$DD_LOG" >&2 || true
		pgrep -u "$DD_UID" -x rootlesskit >/dev/null || die "rootless dockerd of $DD_USER exited while starting; see $DD_LOG"
		die "rootless dockerd of $DD_USER did not answer docker info within 120s; see $DD_LOG"
	fi
	step "docker rootless" "ok (answering at unix://$DD_RUNDIR/docker.sock)"
}

# ------------------------------------------------------------------- reset
if [ -n "$RESET" ]; then
	DW_RUNDIR=/run/user/$DW_UID
	# First: the reset of dockerd below kills every process named containerd.
	"$(dirname "$0")/k8s/cluster.sh" down || die "kubernetes: cluster.sh down failed"
	"$(dirname "$0")/vm/vm.sh" reset || die "vm: vm.sh reset failed"
	if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
		ids=$(docker ps -aq --filter label=io.deathwatch.managed 2>/dev/null || true)
		[ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1 || true
		imgs=$(docker images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | grep -E '^(deathwatch-test|deathwatch-provision)' || true)
		[ -z "$imgs" ] || docker rmi -f $imgs >/dev/null 2>&1 || true
		step "reset docker" "removed deathwatch containers and images"
	fi
	if [ -d /run/systemd/system ] && systemctl is-active -q docker 2>/dev/null; then
		systemctl stop docker docker.socket >/dev/null 2>&1 || true
		step "reset dockerd" "stopped (systemd)"
	elif pgrep -x dockerd >/dev/null; then
		pkill -TERM -x dockerd || true
		for _ in $(seq 1 60); do pgrep -x dockerd >/dev/null || break; sleep 0.5; done
		pkill -KILL -x dockerd 2>/dev/null || true
		pkill -KILL -x containerd 2>/dev/null || true
		step "reset dockerd" "stopped"
	fi
	if command -v podman >/dev/null; then
		podman system reset --force >/dev/null 2>&1 || true
		step "reset podman" "rootful state reset (storage, networks, network backend)"
	fi
	rm -f /etc/containers/containers.conf.d/50-deathwatch.conf
	if getent passwd "$DW_USER" >/dev/null; then
		home=$(getent passwd "$DW_USER" | cut -d: -f6)
		if command -v podman >/dev/null && [ -d "$DW_RUNDIR" ]; then
			(cd / && runuser -u "$DW_USER" -- env XDG_RUNTIME_DIR="$DW_RUNDIR" HOME="$home" podman system reset --force >/dev/null 2>&1 9>&-) || true
		fi
		pkill -KILL -u "$DW_USER" 2>/dev/null || true
		sleep 0.2
		userdel --remove "$DW_USER" >/dev/null 2>&1 || userdel "$DW_USER" >/dev/null 2>&1 || true
		rm -rf "$home"
		step "reset user" "removed $DW_USER and its home"
	fi
	getent group "$DW_USER" >/dev/null && groupdel "$DW_USER" >/dev/null 2>&1
	rootless_docker_reset
	mountpoint -q "$DW_RUNDIR" && umount -l "$DW_RUNDIR"
	rm -rf "$DW_RUNDIR"
	for f in /etc/subuid /etc/subgid; do
		# and podman's range for --userns=auto, only the one this script adds
		[ -f "$f" ] && sed -i -e "/^$DW_USER:/d" -e "/^containers:1073741824:268435456\$/d" -e "/^kubelet:/d" "$f"
	done
	# The owner of the Kubernetes pods' host id range (cluster.sh up).
	if getent passwd kubelet >/dev/null; then userdel kubelet >/dev/null 2>&1 || true; fi
	rm -rf /tmp/deathwatch-rootfs-* /tmp/deathwatch-bin-*
	# What a first launch learns of an engine and keeps (the live FIFO's
	# bind proofs, docker's /info verdict): the next launch learns it anew.
	rm -rf /run/deathwatch/live /run/deathwatch/docker-info
	step reset "done: the next run provisions from scratch (packages stay installed)"
	exit 0
fi

# ---------------------------------------------------------------- packages
missing=()
for p in "${PACKAGES[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	step packages "ok (all ${#PACKAGES[@]} installed)"
else
	step packages "installing ${missing[*]}"
	# A mirror hiccup or another apt holding the lock must not fail a
	# first run: wait for the lock, and try the index once more.
	APT=(apt-get -o DPkg::Lock::Timeout=300 -o Acquire::Retries=3)
	"${APT[@]}" update -qq >/tmp/provision-apt.log 2>&1 || { sleep 5 && "${APT[@]}" update -qq >>/tmp/provision-apt.log 2>&1; } || {
		tail -20 /tmp/provision-apt.log >&2
		die "apt-get update failed (log: /tmp/provision-apt.log); check the Debian mirror in /etc/apt/sources.list*"
	}
	"${APT[@]}" install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/provision-apt.log 2>&1 || {
		tail -20 /tmp/provision-apt.log >&2
		die "apt-get install ${missing[*]} failed (log: /tmp/provision-apt.log)"
	}
	step packages "ok (installed ${missing[*]})"
fi
for c in docker dockerd podman runc newuidmap newgidmap busybox tini bwrap catatonit dumb-init hyperfine ip unshare nsenter; do
	command -v "$c" >/dev/null || die "command $c is missing after installing the packages"
done
# Debian's dynamically linked `busybox` package would not work in a FROM
# scratch image.
if head -c 4096 "$(command -v busybox)" | grep -qa 'ld-linux'; then
	die "$(command -v busybox) is dynamically linked; apt-get install busybox-static"
fi
step busybox "ok ($(command -v busybox), static)"
if [ "$ONLY" = rootless-docker ]; then
	rootless_docker_up
	exit 0
fi

# ---------------------------------------------------------- kubernetes
# The test cluster of the kubernetes runtime (kernel-tests/k8s/cluster.sh
# says what it is), built (when its cache is not intact) and brought up in
# the background from here on; make test's kubernetes lane waits for it.
K8S=$(dirname "$0")/k8s/cluster.sh
# 9>&-: the cluster's daemons must not inherit (and hold forever) our lock.
CLUSTER_SAY_WHO=provision CLUSTER_SAY_STEP="kubernetes " "$K8S" start 9>&- || die "kubernetes: cluster.sh start failed (see above)"

# ------------------------------------------------------------------ docker
if docker info >/dev/null 2>&1; then
	step dockerd "ok (already running)"
else
	if pgrep -x dockerd >/dev/null; then
		step dockerd "running (pid $(pgrep -x dockerd | tr '\n' ' ')) but not answering yet; waiting"
	else
		# No systemd here: start it by hand, detached from our session so
		# that it outlives this script and the test run.
		# 9>&-: the daemon must not inherit (and hold forever) our lock.
		setsid -f dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null 9>&-
		step dockerd "started (log $DOCKERD_LOG); waiting for docker info"
	fi
	# A first start (or a loaded machine) can take a while: wait by the
	# clock, not by a count of tries, and give up only when the daemon
	# died or two minutes passed.
	ok=
	end=$((SECONDS + 120))
	while [ $SECONDS -lt $end ]; do
		if docker info >/dev/null 2>&1; then
			ok=1
			break
		fi
		pgrep -x dockerd >/dev/null || break
		sleep 0.5
	done
	if [ -z "$ok" ]; then
		tail -20 "$DOCKERD_LOG" >&2 || true
		pgrep -x dockerd >/dev/null || die "dockerd exited while starting; see $DOCKERD_LOG"
		die "dockerd did not answer docker info within 120s; see $DOCKERD_LOG"
	fi
	step dockerd "ok (answering)"
fi
# Every docker client on PATH (a newer /usr/local/bin/docker may shadow
# Debian's /usr/bin/docker) must talk to the daemon: API version
# negotiation normally takes care of it.
seen=""
for d in $(type -ap docker); do
	real=$(readlink -f "$d")
	case " $seen " in *" $real "*) continue ;; esac
	seen="$seen $real"
	v=$("$d" version --format '{{.Client.Version}} client, {{.Server.Version}} server, API {{.Server.APIVersion}}' 2>"$ERRLOG") ||
		die "$d cannot talk to dockerd$(errtail); remove it from PATH or upgrade dockerd"
	step "docker client" "ok ($d: $v)"
done

# ------------------------------------------------------------------ podman
# write_if_changed FILE CONTENT [OWNER]: prints "changed" when it wrote.
write_if_changed() {
	local file=$1 content=$2 owner=${3:-}
	if [ -f "$file" ] && [ "$(cat "$file")" = "$content" ]; then
		return 0
	fi
	mkdir -p "$(dirname "$file")"
	printf '%s\n' "$content" >"$file.tmp.$$"
	mv -f "$file.tmp.$$" "$file"
	if [ -n "$owner" ]; then chown "$owner" "$file"; fi
	echo changed
}

hard_nofile=$(ulimit -Hn)
hard_nproc=$(ulimit -Hu)
[ "$hard_nofile" = unlimited ] && hard_nofile=1048576
[ "$hard_nproc" = unlimited ] && hard_nproc=4194304
nofile=$((hard_nofile < 1048576 ? hard_nofile : 1048576))
# Rootful Podman hands conmon (and so runc) an RLIMIT_NPROC of 32768 on
# this kind of machine, whatever ours is; runc cannot raise it without
# CAP_SYS_RESOURCE, so the default must not exceed it (measured).
nproc=$((hard_nproc < 32768 ? hard_nproc : 32768))

sys_conf="$MARK
[containers]
default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]

[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"

[network]
network_backend = \"netavark\""
r=$(write_if_changed /etc/containers/containers.conf.d/50-deathwatch.conf "$sys_conf")
step "podman config" "${r:-ok} (/etc/containers/containers.conf.d/50-deathwatch.conf: runc, cgroupfs, nofile=$nofile nproc=$nproc)"
rt=$(podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}} {{.Host.EventLogger}} {{.Host.NetworkBackend}}' 2>"$ERRLOG") ||
	die "podman info failed$(errtail)"
[ "$rt" = "runc cgroupfs file netavark" ] || die "podman does not take /etc/containers/containers.conf.d (it reports runtime/cgroups/events/network: $rt); put the settings of that file into /etc/containers/containers.conf"
step "podman rootful" "ok ($rt)"

# ------------------------------------------------------------ rootless user
if ! getent passwd "$DW_USER" >/dev/null; then
	useradd --uid "$DW_UID" --user-group --create-home --shell /bin/sh "$DW_USER" ||
		die "useradd $DW_USER (uid $DW_UID) failed; is uid $DW_UID taken? (getent passwd $DW_UID)"
	step user "created $DW_USER (uid $DW_UID)"
else
	[ "$(id -u "$DW_USER")" = "$DW_UID" ] || die "user $DW_USER exists with uid $(id -u "$DW_USER"), expected $DW_UID; remove it (userdel -r $DW_USER) and run again"
	step user "ok ($DW_USER uid $DW_UID)"
fi
DW_HOME=$(getent passwd "$DW_USER" | cut -d: -f6)
[ -d "$DW_HOME" ] || { mkdir -p "$DW_HOME" && chown "$DW_USER:$DW_USER" "$DW_HOME"; }

# DW_SUBIDS ids: rootless Podman gives each box a range of 65536 of its
# own (--userns=auto:size=65536), so the user's range must hold as many
# boxes as the tests run at once; a smaller range of an earlier run is
# replaced.
DW_SUBIDS=2097152
subids_changed=
for f in /etc/subuid /etc/subgid; do
	touch "$f"
	have=$(awk -F: -v u="$DW_USER" '$1==u {print $3; exit}' "$f")
	[ -n "$have" ] && [ "$have" -ge "$DW_SUBIDS" ] && continue
	sed -i -e "/^$DW_USER:/d" "$f"
	# The first ids after every user's range (podman's pool for
	# --userns=auto, "containers", lies far above and is not a user's).
	start=$(awk -F: 'BEGIN{m=100000} $1!="containers" && $1!="kubelet" {e=$2+$3; if (e>m) m=e} END{print m}' "$f")
	echo "$DW_USER:$start:$DW_SUBIDS" >>"$f"
	subids_changed=1
done
step "subordinate ids" "${subids_changed:+added; }$(grep "^$DW_USER:" /etc/subuid | head -1) / $(grep "^$DW_USER:" /etc/subgid | head -1)"

# Rootful podman gives each box a user namespace of its own
# (--userns=auto), taking its ranges from the user "containers": 2^30 …
# 2^30+2^28, below the native runtime's block at 2^31, which steers clear
# of every /etc/subuid range (podman's customary 2^31 … 2^32 would leave
# native no room at all).
podman_ids=ok
for f in /etc/subuid /etc/subgid; do
	grep -q "^containers:" "$f" || { echo "containers:1073741824:268435456" >>"$f"; podman_ids=added; }
done
step "podman userns ids" "$podman_ids ($(grep "^containers:" /etc/subuid | head -1) / $(grep "^containers:" /etc/subgid | head -1), for --userns=auto)"

# The runtime dir logind would create: a tmpfs, so that state does not
# survive a reboot (Podman would believe stale containers still run).
if ! mountpoint -q "$DW_RUNDIR"; then
	mkdir -p "$DW_RUNDIR"
	if mount -t tmpfs -o "mode=0700,uid=$DW_UID,gid=$DW_UID,size=256m" tmpfs "$DW_RUNDIR" 2>/dev/null; then
		step "runtime dir" "mounted tmpfs $DW_RUNDIR"
	else
		chown "$DW_USER:$DW_USER" "$DW_RUNDIR" && chmod 0700 "$DW_RUNDIR"
		step "runtime dir" "created $DW_RUNDIR (no tmpfs)"
	fi
else
	step "runtime dir" "ok ($DW_RUNDIR)"
fi

# Rootless Podman warns '"/" is not a shared mount' on every command
# otherwise; systemd makes / shared at boot, we do the same.
if [ "$(findmnt -no PROPAGATION /)" != shared ]; then
	mount --make-rshared / || die "mount --make-rshared / failed"
	step "root mount" "made shared"
else
	step "root mount" "ok (shared)"
fi

if [ -c /dev/net/tun ]; then
	if [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
		chmod 0666 /dev/net/tun
		step "tun device" "made /dev/net/tun 0666 (as udev does)"
	else
		step "tun device" "ok (/dev/net/tun 0666)"
	fi
else
	step "tun device" "none: rootless Podman runs need --network none"
fi

# tracefs, as systemd mounts it: make bench's kill trace reads the
# kernel's signal and wake-up events from an instance of its own.
if [ -d /sys/kernel/tracing ] && ! mountpoint -q /sys/kernel/tracing; then
	mount -t tracefs nodev /sys/kernel/tracing 2>"$ERRLOG" || die "mount tracefs on /sys/kernel/tracing failed$(errtail)"
	step tracefs "mounted /sys/kernel/tracing (as systemd does)"
else
	step tracefs "ok"
fi

user_conf="$MARK
[containers]
default_ulimits = [\"nofile=$nofile:$nofile\"]

[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"

[network]
network_backend = \"netavark\""
# Native rootless overlay (kernel >= 5.13) is much faster than vfs for
# container creation; older kernels get vfs.
kver=$(uname -r | awk -F. '{printf "%d%03d", $1, $2}')
driver=vfs
[ "$kver" -ge 5013 ] && driver=overlay
storage_conf="$MARK
[storage]
driver = \"$driver\"
runroot = \"$DW_RUNDIR/containers\"
graphroot = \"$DW_HOME/.local/share/containers/storage\""
install -d -o "$DW_USER" -g "$DW_USER" "$DW_HOME/.config" "$DW_HOME/.config/containers"
r1=$(write_if_changed "$DW_HOME/.config/containers/containers.conf" "$user_conf" "$DW_USER:$DW_USER")
r2=$(write_if_changed "$DW_HOME/.config/containers/storage.conf" "$storage_conf" "$DW_USER:$DW_USER")
# rootless runs in /: the user must be able to enter the working directory.
# 9>&-: rootless Podman leaves a pause process behind; not with our lock.
as_user() { (cd / && runuser -u "$DW_USER" -- env XDG_RUNTIME_DIR="$DW_RUNDIR" HOME="$DW_HOME" "$@" 9>&-); }
if [ -n "$r2" ] || [ -n "$subids_changed" ]; then
	# New storage location or new id ranges: start the user's Podman
	# state afresh (only this test user's).
	as_user podman system migrate >/dev/null 2>&1 || true
	as_user podman system reset --force >/dev/null 2>&1 || true
fi
step "podman rootless cfg" "${r1:-${r2:-ok}} (~$DW_USER/.config/containers: runc, $driver storage)"
out=$(as_user podman info --format '{{.Host.Security.Rootless}} {{.Host.OCIRuntime.Name}} {{.Store.GraphDriverName}} {{.Store.RunRoot}}' 2>"$ERRLOG") ||
	die "rootless podman info as $DW_USER failed$(errtail)"
[ "$out" = "true runc $driver $DW_RUNDIR/containers" ] || die "rootless podman as $DW_USER reports '$out', expected 'true runc $driver $DW_RUNDIR/containers'"
step "podman rootless" "ok ($out)"
rootless_docker_up

# ------------------------------------------------------------ end to end
# One busybox-only probe image per engine, imported from a tarball (there is
# no registry), and one container run in each.
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir" "$ERRLOG"' EXIT
mkdir -p "$probe_dir/root/bin"
cp "$(command -v busybox)" "$probe_dir/root/bin/busybox"
for a in sh true; do ln -s busybox "$probe_dir/root/bin/$a"; done
tar -C "$probe_dir/root" --owner=0 --group=0 --numeric-owner -cf "$probe_dir/probe.tar" .
chmod 0755 "$probe_dir"
chmod 0644 "$probe_dir/probe.tar"

probe() { # name, engine argv...
	local name=$1
	shift
	local t0 t1 out
	if ! "$@" image inspect "$PROBE" >/dev/null 2>&1; then
		"$@" import "$probe_dir/probe.tar" "$PROBE" >/dev/null 2>"$ERRLOG" || die "$name: import of a busybox tarball failed$(errtail)"
	fi
	t0=$(date +%s%N)
	out=$("$@" run --rm --network none "$PROBE" /bin/sh -c 'echo ok' 2>"$ERRLOG") || die "$name: run of $PROBE failed$(errtail)"
	t1=$(date +%s%N)
	[ "$out" = ok ] || die "$name: run of $PROBE printed '$out' on stdout instead of ok$(errtail)"
	step "$name run" "ok ($(((t1 - t0) / 1000000)) ms)"
}
probe docker docker
probe "podman rootful" podman
probe "podman rootless" as_user podman
probe "docker rootless" as_dd docker

# ------------------------------------------------------------------ vm
# The VM rig's kernels and root image (kernel-tests/vm/vm.sh says what
# they are); skipped when the cache is built from the same recipe.
"$(dirname "$0")/vm/vm.sh" build 9>&- || die "vm: vm.sh build failed (see above)"

k8s_state=$(cat /run/deathwatch-k8s.bringup 2>/dev/null || echo unknown)
if [ "$k8s_state" = ready ]; then
	step kubernetes "ok (up)"
else
	step kubernetes "$k8s_state (the bring-up goes on in the background; cluster.sh wait waits for it)"
fi
step ready "machine ready for make test"
