#!/usr/bin/env bash
# vm.sh — qemu guests that are the hosts deathwatch's users have: pure
# cgroup v2, with and without systemd, on Debian's stock kernels (6.1 of
# bookworm, 5.10 of bullseye). The kernel tests run there what this
# machine (cgroup v1 hybrid, a newer kernel) cannot show.
#
#   vm.sh build     kernels and the root image into /var/cache/deathwatch-vm
#                   (skipped when there and built from this recipe)
#   vm.sh run [--guest G] [--as root|user] [--timeout DUR] TREE -- CMD [ARG...]
#                   boots guest G, runs CMD there with TREE (a checkout,
#                   its bin/ built) mounted read-only at the same path,
#                   prints its output and exits with its status
#   vm.sh test [--guest G] [--as root|user] [--timeout DUR] TREE PATTERN
#                   the CLI checks (guest/cli-checks: doctor, limits, a
#                   SIGKILLed supervisor, reconcile) in guest G, then, as
#                   root, the kernel tests matching PATTERN (-test.run;
#                   go test -c ./kernel-tests/ in TREE); '' runs the CLI
#                   checks alone. --as user: the CLI checks as the test
#                   user, and the kernel tests with the native-unprivileged
#                   rig alone, every supervisor the user's, under systemd
#                   in the user's own session (ktest.EnvUserSession)
#   vm.sh guests    the guests' names, one a line
#   vm.sh landlock G
#                   the Landlock ABI of guest G's kernel (0: none)
#   vm.sh reset     removes the cache (a fresh machine's first build)
#
# Guests (G): v2 (6.1, pure cgroup v2, a minimal init: no systemd),
# v2-systemd (6.1, systemd 252 as init), 5.10 (bullseye's 5.10, pure
# cgroup v2, the minimal init). The default is v2.
#
# What a command in the guest can rely on: it runs from / as root, or as
# dwtest (uid 2345, sub-ids 231072:2097152, runtime dir /run/user/2345,
# under systemd a lingering user whose command runs through
# `systemd-run --user`); 2 vCPUs, 3 GiB; TREE at its host path, read-only;
# /dw/out, the run's own folder (read-write; on the host, the folder the
# run prints at its end); /tmp a tmpfs; no network but lo; Debian
# bookworm's userland (bash, busybox, util-linux, procps, iproute2,
# python3, uidmap, tmux).
#
# DW_VM_SYSCTL: KEY=VALUE words the guest's kernel sets at boot (its
# sysctl.KEY=VALUE parameters), e.g. kernel.yama.ptrace_scope=3.
#
# Exit status: the command's own; 125 when the guest ends without a
# result (the console log's tail says why), 2 for a usage error, 1 when
# the host cannot start a guest.
#
# How the guest is made: Debian's linux-image packages (apt-get download;
# bullseye's through an apt configuration of its own), their
# xz-compressed payload unpacked into the ELF vmlinux qemu boots directly;
# an initramfs (host busybox and the kernel's own modules for virtio, ext4
# and 9p, loaded in modules.dep order) that mounts a debootstrap'd
# bookworm root image (opened with snapshot=on: every boot starts from
# the same image) and the 9p shares; cgroup_no_v1=all. qemu uses KVM where
# /dev/kvm can run a stock kernel, TCG otherwise (DW_VM_ACCEL=kvm|tcg
# overrides); q35, 2 vCPUs, 3 GiB. One guest at a time on a machine (a
# lock): TCG guests take a whole core each.
set -euo pipefail

export PATH=$PATH:/usr/local/go/bin:/usr/local/sbin:/usr/sbin:/sbin
export LC_ALL=C

CACHE=${DW_VM_CACHE:-/var/cache/deathwatch-vm}
HERE=$(cd "$(dirname "$0")" && pwd)
# What the root image holds beyond debootstrap's minbase.
ROOT_PACKAGES=systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,kmod,util-linux,procps,iproute2,busybox-static,python3,uidmap,tmux
MIRROR=${DW_VM_MIRROR:-http://deb.debian.org/debian}
SECURITY=${DW_VM_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# The modules the initramfs loads (their dependencies come first).
BOOT_MODULES=(virtio_pci virtio_blk crc32c_generic ext4 9pnet_virtio 9p)
ROOT_SIZE=2G

say() { printf 'vm: %-22s %s\n' "$1:" "$2"; }
die() {
	printf 'vm: FAILED: %s\n' "$1" >&2
	exit 1
}
usage() {
	echo "vm: usage: vm.sh build | run [--guest G] [--as root|user] [--timeout DUR] TREE -- CMD... | test [--guest G] [--as root|user] [--timeout DUR] TREE PATTERN | guests | reset (vm.sh -h says more)" >&2
	exit 2
}

# guest_kernel G: the kernel a guest boots; guest_init G: its init.
guest_kernel() {
	case "$1" in
	v2 | v2-systemd) echo bookworm ;;
	5.10) echo bullseye ;;
	*) return 1 ;;
	esac
}
guest_init() {
	case "$1" in
	v2-systemd) echo systemd ;;
	*) echo plain ;;
	esac
}
# guest_landlock G: the Landlock ABI of G's kernel (Debian's 6.1 has
# ABI 2; Landlock came with 5.13).
guest_landlock() {
	case "$1" in
	v2 | v2-systemd) echo 2 ;;
	5.10) echo 0 ;;
	*) return 1 ;;
	esac
}
GUESTS=(v2 v2-systemd 5.10)

# kernel_recipe, root_recipe: digests of what each part of the cache is
# built from (the functions that build it, their inputs); a change
# rebuilds that part.
kernel_recipe() {
	{
		declare -f apt_for build_kernel file_is_static
		echo "${BOOT_MODULES[*]}"
		cat "$HERE/guest/stage1-init"
	} | sha256sum | cut -c1-16
}
root_recipe() {
	{
		declare -f build_root
		echo "$ROOT_PACKAGES $ROOT_SIZE"
		for f in dw-init dw-run dw-run.service; do cat "$HERE/guest/$f"; done
	} | sha256sum | cut -c1-16
}

# apt_for SUITE: an APT_CONFIG for SUITE's kernel packages, of its own
# (the host's sources and state stay untouched).
apt_for() {
	local suite=$1 dir=$CACHE/apt/$1 key=/usr/share/keyrings/debian-archive-$1-stable.gpg
	local sec=/usr/share/keyrings/debian-archive-$1-security-automatic.gpg
	[ -r "$key" ] && [ -r "$sec" ] || die "no Debian archive key for $suite ($key); apt-get install debian-archive-keyring"
	mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
	cat >"$dir/sources.list" <<-EOF
		deb [signed-by=$key] $MIRROR $suite main
		deb [signed-by=$sec] $SECURITY $suite-security main
	EOF
	cat >"$dir/apt.conf" <<-EOF
		Dir::State "$dir";
		Dir::State::Lists "$dir/lists";
		Dir::State::status "/dev/null";
		Dir::Cache "$dir/cache";
		Dir::Etc::SourceList "$dir/sources.list";
		Dir::Etc::SourceParts "$dir/none";
		Dir::Etc::Preferences "/dev/null";
		Dir::Etc::PreferencesParts "$dir/none";
		APT::Architecture "amd64";
		APT::Architectures { "amd64"; };
		APT::Sandbox::User "root";
	EOF
	mkdir -p "$dir/none"
	echo "$dir/apt.conf"
}

# build_kernel SUITE: $CACHE/kernel-SUITE/{vmlinux,initrd,release}.
build_kernel() {
	local suite=$1 out=$CACHE/kernel-$1 conf pkg work rel off m
	conf=$(apt_for "$suite")
	APT_CONFIG=$conf apt-get -q update >"$CACHE/apt-$suite.log" 2>&1 || die "apt-get update for $suite failed (see $CACHE/apt-$suite.log)"
	pkg=$(APT_CONFIG=$conf apt-cache depends linux-image-amd64 | awk '$1=="Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}')
	[ -n "$pkg" ] || die "$suite: linux-image-amd64 names no kernel package (apt-cache depends linux-image-amd64)"
	work=$(mktemp -d "$CACHE/kernel-$suite.XXXXXX")
	(cd "$work" && APT_CONFIG=$conf apt-get -q download "$pkg" >>"$CACHE/apt-$suite.log" 2>&1) || die "apt-get download $pkg failed (see $CACHE/apt-$suite.log)"
	dpkg-deb -x "$work"/linux-image-*.deb "$work/x"
	rel=$(basename "$(ls -d "$work"/x/lib/modules/*)")
	# The bzImage's payload is xz (Debian's config): its ELF is the
	# vmlinux qemu loads directly through its PVH entry point.
	off=$(grep -aobP '\xfd7zXZ\x00' "$work/x/boot/vmlinuz-$rel" | head -1 | cut -d: -f1)
	[ -n "$off" ] || die "$pkg: no xz payload in vmlinuz-$rel"
	tail -c +$((off + 1)) "$work/x/boot/vmlinuz-$rel" | xz -dcq >"$work/vmlinux" 2>/dev/null || true
	[ "$(head -c4 "$work/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] || die "$pkg: the xz payload is not an ELF kernel"
	depmod -b "$work/x" "$rel"
	mkdir -p "$work/initrd/modules" "$work/initrd/bin"
	: >"$work/initrd/modules.load"
	for m in "${BOOT_MODULES[@]}"; do
		# modules.dep: "path: dep1 dep2" (deps of deps listed too, the
		# ones loaded last first); ordering by it loads each dependency
		# before its users.
		local line path deps
		line=$(awk -v m="$m" -F: '{n=$1; sub(/.*\//, "", n); sub(/\.ko.*/, "", n); gsub(/-/, "_", n)} n==m {print; exit}' "$work/x/lib/modules/$rel/modules.dep")
		if [ -z "$line" ]; then
			grep -q "/$m.ko" "$work/x/lib/modules/$rel/modules.builtin" 2>/dev/null && continue
			die "$pkg: module $m is neither in modules.dep nor built in"
		fi
		path=${line%%:*} deps=${line#*:}
		for d in $(echo "$deps" | tr ' ' '\n' | tac) "$path"; do
			grep -qx "$(basename "$d")" "$work/initrd/modules.load" && continue
			cp "$work/x/lib/modules/$rel/$d" "$work/initrd/modules/"
			basename "$d" >>"$work/initrd/modules.load"
		done
	done
	cp "$(command -v busybox)" "$work/initrd/bin/busybox"
	file_is_static "$work/initrd/bin/busybox" || die "the host's busybox is not static; apt-get install busybox-static"
	install -m 0755 "$HERE/guest/stage1-init" "$work/initrd/init"
	(cd "$work/initrd" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"
	rm -rf "$out"
	mkdir -p "$out"
	mv "$work/vmlinux" "$work/initrd.gz" "$out/"
	echo "$pkg $rel" >"$out/release"
	rm -rf "$work"
}

file_is_static() { ! LC_ALL=C readelf -l "$1" 2>/dev/null | grep -q 'INTERP'; }

# build_root: $CACHE/root.img, bookworm with the test user and the rig's
# init files.
build_root() {
	local work
	work=$(mktemp -d "$CACHE/root.XXXXXX")
	debootstrap --variant=minbase --include="$ROOT_PACKAGES" bookworm "$work/root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
		die "debootstrap bookworm failed (see $CACHE/debootstrap.log)"
	local r=$work/root
	chroot "$r" useradd --uid 2345 --user-group --create-home --shell /bin/bash dwtest
	echo "dwtest:231072:2097152" >"$r/etc/subuid"
	echo "dwtest:231072:2097152" >"$r/etc/subgid"
	# Under systemd: the user's manager runs from boot (as a logged-in
	# user's would), and nothing waits for a terminal.
	mkdir -p "$r/var/lib/systemd/linger"
	touch "$r/var/lib/systemd/linger/dwtest"
	install -m 0755 "$HERE/guest/dw-init" "$HERE/guest/dw-run" "$r/usr/local/sbin/"
	install -m 0644 "$HERE/guest/dw-run.service" "$r/etc/systemd/system/"
	chroot "$r" systemctl -q enable dw-run.service
	chroot "$r" systemctl -q mask serial-getty@.service getty@.service systemd-networkd-wait-online.service
	echo dw-guest >"$r/etc/hostname"
	: >"$r/etc/fstab"
	rm -rf "$r/var/cache/apt/archives"/*.deb "$r/var/lib/apt/lists"/*
	mke2fs -q -t ext4 -L dw-root -d "$r" "$work/root.img" "$ROOT_SIZE" || die "mke2fs of the root image failed"
	mv "$work/root.img" "$CACHE/root.img"
	rm -rf "$work"
}

cmd_build() {
	[ "$(id -u)" = 0 ] || die "vm.sh build runs as root (debootstrap, chroot); run: sudo $0 build"
	mkdir -p "$CACHE"
	exec 8>"$CACHE/build.lock"
	flock 8
	for t in qemu-system-x86_64 debootstrap mke2fs cpio xz depmod busybox dpkg-deb; do
		command -v "$t" >/dev/null || die "$t is missing; kernel-tests/provision.sh installs it (qemu-system-x86 debootstrap e2fsprogs cpio xz-utils kmod busybox-static)"
	done
	local want start s
	want=$(kernel_recipe)
	for s in bookworm bullseye; do
		if [ "$(cat "$CACHE/kernel-$s/recipe" 2>/dev/null)" = "$want" ]; then
			say "kernel $s" "ok ($(cat "$CACHE/kernel-$s/release"))"
			continue
		fi
		start=$(date +%s)
		build_kernel "$s"
		echo "$want" >"$CACHE/kernel-$s/recipe"
		say "kernel $s" "$(cat "$CACHE/kernel-$s/release") in $(($(date +%s) - start)) s"
	done
	want=$(root_recipe)
	if [ "$(cat "$CACHE/root.recipe" 2>/dev/null)" = "$want" ] && [ -f "$CACHE/root.img" ]; then
		say "root image" "ok ($CACHE/root.img)"
		return
	fi
	rm -f "$CACHE/root.recipe"
	start=$(date +%s)
	build_root
	echo "$want" >"$CACHE/root.recipe"
	say "root image" "bookworm in $(($(date +%s) - start)) s ($CACHE/root.img)"
}

cmd_reset() {
	[ "$(id -u)" = 0 ] || die "vm.sh reset runs as root; run: sudo $0 reset"
	rm -rf "$CACHE"
	say reset "removed $CACHE"
}

# accel: KVM where it can run a stock kernel, TCG otherwise. A PVM host
# (kvm_pvm) offers /dev/kvm for its own guest kernels only.
accel() {
	case "${DW_VM_ACCEL:-}" in
	kvm | tcg)
		echo "$DW_VM_ACCEL"
		return
		;;
	"") ;;
	*) die "DW_VM_ACCEL is '$DW_VM_ACCEL'; want kvm or tcg (or unset)" ;;
	esac
	if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then
		echo kvm
	else
		echo tcg
	fi
}

# qemu_args GUEST TREE OUT ACCEL: the qemu command line, one word a line.
qemu_args() {
	local guest=$1 tree=$2 out=$3 acc=$4 k
	k=$CACHE/kernel-$(guest_kernel "$guest")
	local cpu=max
	[ "$acc" = kvm ] && cpu=host
	local sysctls="" kv
	for kv in ${DW_VM_SYSCTL:-}; do
		sysctls="$sysctls sysctl.$kv"
	done
	printf '%s\n' qemu-system-x86_64 -machine q35 -accel "$acc" -cpu "$cpu" -smp 2 -m 3G \
		-nodefaults -no-reboot -display none -monitor none \
		-serial "file:$out/console.log" \
		-kernel "$k/vmlinux" -initrd "$k/initrd.gz" \
		-append "console=ttyS0 quiet panic=-1 cgroup_no_v1=all dw.init=$(guest_init "$guest") dw.tree=$tree$sysctls" \
		-drive "file=$CACHE/root.img,if=virtio,format=raw,snapshot=on" \
		-virtfs "local,path=$tree,mount_tag=tree,security_model=none,readonly=on" \
		-virtfs "local,path=$out,mount_tag=out,security_model=none"
}

# parse_run_flags: --guest, --as, --timeout into GUEST AS TIMEOUT (and
# TEST_TIMEOUT, the kernel tests' own: 5 minutes less, for the CLI checks
# and the boot); the rest into ARGS.
parse_run_flags() {
	GUEST=v2 AS=root TIMEOUT=${DW_VM_TIMEOUT:-40m} ARGS=()
	while [ $# -gt 0 ]; do
		case "$1" in
		--guest)
			GUEST=${2:-}
			shift 2 || usage
			;;
		--as)
			AS=${2:-}
			shift 2 || usage
			;;
		--timeout)
			TIMEOUT=${2:-}
			shift 2 || usage
			;;
		*)
			ARGS+=("$1")
			shift
			;;
		esac
	done
	guest_kernel "$GUEST" >/dev/null || die "no guest '$GUEST'; the guests are: ${GUESTS[*]}"
	case "$AS" in root | user) ;; *) die "--as takes root or user, not '$AS'" ;; esac
	local min
	if [[ $TIMEOUT =~ ^([0-9]+)m$ ]]; then
		min=${BASH_REMATCH[1]}
	elif [[ $TIMEOUT =~ ^([0-9]+)h$ ]]; then
		min=$((BASH_REMATCH[1] * 60))
	else
		die "--timeout takes whole minutes or hours (40m, 2h), not '$TIMEOUT'"
	fi
	[ "$min" -gt 5 ] || die "--timeout $TIMEOUT leaves the kernel tests no time; give more than 5m"
	TEST_TIMEOUT=$((min - 5))m
}

# boot TREE OUT: boots $GUEST with OUT/cmd as the command; prints its
# output as it comes and returns its exit status.
boot() {
	local tree=$1 out=$2 acc qpid start rc
	[ -d "$tree" ] || die "no checkout at $tree"
	case "$tree" in *[[:space:],]*) die "the checkout's path '$tree' has a space or comma; the guest mounts it by that path" ;; esac
	[ -x "$tree/bin/supervisor" ] && [ -x "$tree/bin/watcher" ] || die "$tree/bin has no supervisor and watcher; run make build in $tree"
	# The test user reads the command and the programs beside it.
	chmod -R a+rX "$out"
	[ -f "$CACHE/root.recipe" ] && [ -f "$CACHE/kernel-$(guest_kernel "$GUEST")/recipe" ] || die "no guest images in $CACHE; run: $0 build (kernel-tests/provision.sh does)"
	echo "$AS" >"$out/as"
	: >"$out/output"
	acc=$(accel)
	mapfile -t q < <(qemu_args "$GUEST" "$tree" "$out" "$acc")
	exec 9>"$CACHE/run.lock"
	if ! flock -n 9; then
		say "$GUEST" "waiting for another guest to end (one at a time: $CACHE/run.lock)"
		flock 9
	fi
	say "$GUEST" "booting ($acc, $(cut -d' ' -f1 "$CACHE/kernel-$(guest_kernel "$GUEST")/release"), $(guest_init "$GUEST") init${DW_VM_SYSCTL:+, sysctl $DW_VM_SYSCTL}, as $AS; output below, files in $out)"
	start=$(date +%s)
	# qemu dies with this script however it ends (the parent-death
	# signal on timeout and on qemu), and at TIMEOUT.
	setpriv --pdeathsig KILL timeout --kill-after=10 "$TIMEOUT" setpriv --pdeathsig KILL "${q[@]}" 9>&- 2>"$out/qemu.stderr" &
	qpid=$!
	trap 'kill $qpid 2>/dev/null' INT TERM
	tail -n +1 -F --pid=$qpid "$out/output" 2>/dev/null 9>&- &
	local tpid=$!
	# qemu's peak RSS (VmHWM of timeout's child), sampled while it runs.
	(
		while kill -0 $qpid 2>/dev/null; do
			q=$(pgrep -P $qpid | head -1)
			[ -n "$q" ] && awk '$1=="VmHWM:" {print int($2/1024)}' "/proc/$q/status" >"$out/qemu-peak-mib.tmp" 2>/dev/null &&
				mv "$out/qemu-peak-mib.tmp" "$out/qemu-peak-mib"
			sleep 2
		done
	) 9>&- &
	local mpid=$!
	rc=0
	wait $qpid || rc=$?
	wait $tpid $mpid 2>/dev/null || true
	exec 9>&-
	if [ ! -f "$out/rc" ]; then
		if [ $rc = 124 ] || [ $rc = 137 ]; then
			say "$GUEST" "FAILED: no result within $TIMEOUT (qemu stopped); console tail:"
		else
			say "$GUEST" "FAILED: the guest ended without a result (qemu exit $rc: $(tail -c 300 "$out/qemu.stderr" | tr '\n' ' ')); console tail:"
		fi
		tail -20 "$out/console.log" | sed 's/^/  | /'
		say "$GUEST" "console: $out/console.log"
		return 125
	fi
	rc=$(cat "$out/rc")
	local all=$(($(date +%s) - start)) cmd
	cmd=$(cat "$out/seconds")
	say "$GUEST" "exit $rc (command $cmd s; boot and power-off $(awk -v a="$all" -v c="$cmd" 'BEGIN{printf "%.0f", a-c}') s; qemu peak RSS $(cat "$out/qemu-peak-mib" 2>/dev/null || echo ?) MiB)"
	return "$rc"
}

cmd_run() {
	parse_run_flags "$@"
	set -- "${ARGS[@]}"
	[ $# -ge 3 ] && [ "$2" = -- ] || usage
	local tree out
	tree=$(realpath "$1")
	shift 2
	out=$(mktemp -d /var/tmp/dw-vm-XXXXXX)
	{
		echo '#!/bin/bash'
		printf '%q ' "$@"
		echo
	} >"$out/cmd"
	boot "$tree" "$out"
}

cmd_test() {
	parse_run_flags "$@"
	set -- "${ARGS[@]}"
	[ $# = 2 ] || usage
	local tree pattern out rigs=native,native-unprivileged
	tree=$(realpath "$1") pattern=$2
	out=$(mktemp -d /var/tmp/dw-vm-XXXXXX)
	install -m 0755 "$HERE/guest/cli-checks" "$out/cli-checks"
	printf '#!/bin/bash\n/dw/out/cli-checks %q\nchecks=$?\n' "$tree" >"$out/cmd"
	if [ -n "$pattern" ] && [ "$AS" = user ]; then
		# The user's run: the CLI checks as the user (dw-run), the kernel
		# tests as root with the unprivileged rig alone, each supervisor
		# the user's; under systemd in the user's own session.
		rigs=native-unprivileged
		cat >"$out/cmd" <<-EOF
			#!/bin/bash
			/dw/out/as-user /dw/out/cli-checks $(printf %q "$tree")
			checks=\$?
			[ -d /run/systemd/system ] && export DEATHWATCH_USER_SESSION=systemd
		EOF
		user_runner >"$out/as-user"
		chmod 0755 "$out/as-user"
	fi
	if [ -n "$pattern" ]; then
		# The test binary and the ktest programs, built here: the guest
		# has no Go.
		(cd "$tree" && go test -c -o "$out/kernel-tests.test" ./kernel-tests/) || die "go test -c ./kernel-tests/ in $tree failed"
		mkdir -p "$out/tools"
		# Every program of kernel-tests/ktest (ktest.ToolPath finds them
		# in DEATHWATCH_KTEST_TOOLS) and the example Go controller.
		local t
		for t in "$tree"/kernel-tests/ktest/*/; do
			t=$(basename "$t")
			grep -qs '^package main' "$tree/kernel-tests/ktest/$t"/*.go || continue
			(cd "$tree" && CGO_ENABLED=0 go build -trimpath -o "$out/tools/$t" "./kernel-tests/ktest/$t") || die "go build ./kernel-tests/ktest/$t in $tree failed"
		done
		(cd "$tree" && CGO_ENABLED=0 go build -trimpath -o "$out/tools/gocontroller" ./examples/gocontroller) || die "go build ./examples/gocontroller in $tree failed"
		# The tini parity tests compare with the host's tini and
		# dumb-init (the root image has neither; the host's are Debian's,
		# static or on libc alone): installed in the guest's own root.
		local c
		for c in tini-static dumb-init; do
			[ -x "/usr/bin/$c" ] || die "no /usr/bin/$c for the tini parity tests; apt-get install tini dumb-init (kernel-tests/provision.sh does)"
			cp "/usr/bin/$c" "$out/tools/$c"
		done
		cat >>"$out/cmd" <<-EOF
			install -m 0755 /dw/out/tools/tini-static /dw/out/tools/dumb-init /usr/bin/
			# The tests' folders (mount sources among them) on the root's
			# ext4: the guest's /tmp is a tmpfs, whose idmapped mounts
			# come with Linux 6.3.
			export TMPDIR=/var/tmp
			export DEATHWATCH_BIN=$(printf %q "$tree/bin") DEATHWATCH_KTEST_TOOLS=/dw/out/tools DEATHWATCH_RIGS=$rigs
			cd $(printf %q "$tree/kernel-tests") && /dw/out/kernel-tests.test -test.count=1 -test.v -test.timeout=$TEST_TIMEOUT -test.run $(printf %q "$pattern")
			tests=\$?
			[ \$checks = 0 ] || echo "vm: the CLI checks failed (above)"
			[ \$tests = 0 ] || echo "vm: the kernel tests failed (exit \$tests)"
			[ \$checks = 0 ] && exit \$tests
			exit 1
		EOF
	else
		echo 'exit $checks' >>"$out/cmd"
	fi
	# The user's run with kernel tests boots as root (the tests need it).
	[ -n "$pattern" ] && AS=root
	boot "$tree" "$out"
}

# user_runner: a script that runs its arguments as the test user the way
# dw-run runs a user's command (under systemd in the user's manager,
# systemd-run --user), for a root command that runs a step as the user.
user_runner() {
	cat <<-'EOF'
		#!/bin/bash
		if [ -d /run/systemd/system ]; then
			i=0
			until [ -S /run/user/2345/bus ] && systemctl -q is-active user@2345.service; do
				i=$((i + 1))
				[ $i -gt 600 ] && break
				sleep 0.1
			done
			exec runuser -u dwtest -- env XDG_RUNTIME_DIR=/run/user/2345 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/2345/bus \
				systemd-run --user --quiet --wait --pipe --collect "$@"
		fi
		exec runuser -u dwtest -- env XDG_RUNTIME_DIR=/run/user/2345 "$@"
	EOF
}

case "${1:-}" in
build) cmd_build ;;
run)
	shift
	cmd_run "$@"
	;;
test)
	shift
	cmd_test "$@"
	;;
guests) printf '%s\n' "${GUESTS[@]}" ;;
landlock)
	guest_landlock "${2:-}" || die "no guest '${2:-}'; the guests are: ${GUESTS[*]}"
	;;
reset) cmd_reset ;;
-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
*) usage ;;
esac
