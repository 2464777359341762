#!/usr/bin/env bash
# test-vm.sh [TREE]: make test-vm, the VM lane of make test. In each guest
# of kernel-tests/vm/vm.sh (pure cgroup v2 on 6.1 without and with
# systemd, and 5.10): the CLI checks and every native kernel test as
# root, then the CLI checks as the unprivileged test user and the
# unprivileged tests with every supervisor the user's (under systemd in
# the user's own session). Every run goes to the end; one line per run
# at the end, and the exit status is 1 when any run failed. TREE
# (default: this checkout) must have bin/ built.
#
#   DW_VM_GUESTS   the guests to run (default: every one, in vm.sh guests order)
#   DW_VM_RUN      the -run pattern of the root runs (default: the native set)
#   DW_VM_PLAN     the runs, as GUEST:AS[:PATTERN] words (AS root or user; no
#                  PATTERN: the CLI checks alone; the words native and
#                  unprivileged: those sets); default: every guest as
#                  root with DW_VM_RUN, then as user with the unprivileged
#                  set; 5.10 (where native is refused) the CLI checks as
#                  root alone
#   DW_VM_TIMEOUT  each run's bound (vm.sh --timeout; default 40m, and 3h
#                  for the native and unprivileged sets, which a TCG guest
#                  on a busy 2-core host runs for far longer than 40m)
set -uo pipefail

export PATH=$PATH:/usr/local/go/bin
HERE=$(cd "$(dirname "$0")" && pwd)
TREE=${1:-$(cd "$HERE/../.." && pwd)}
# The native set: every kernel test that needs no engine and no cluster
# (its rigs are native and native-unprivileged; DEATHWATCH_RIGS says so
# to the tests that run every rig the machine has), read from the tests'
# source by kernel-tests/ktest/nativeset; the unprivileged set: those of
# it that run the supervisor as the unprivileged user. In a guest both
# leave out the tests that require a Landlock ABI its kernel lacks (they
# fail there by design; the summary names them).
nativeset() {
	(cd "$TREE" && go run ./kernel-tests/ktest/nativeset "$@" ./kernel-tests) || {
		echo "test-vm: FAILED: go run ./kernel-tests/ktest/nativeset in $TREE" >&2
		exit 1
	}
}
read -r -a guests <<<"${DW_VM_GUESTS:-$("$HERE/vm.sh" guests | tr '\n' ' ')}"

plan=${DW_VM_PLAN:-}
if [ -z "$plan" ]; then
	for g in "${guests[@]}"; do
		case "$g" in
		5.10) plan="$plan $g:root" ;;
		*) plan="$plan $g:root:${DW_VM_RUN:-native} $g:user:unprivileged" ;;
		esac
	done
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
summary=()
failed=0
start=$(date +%s)
for run in $plan; do
	IFS=: read -r g as pat <<<"$run"
	abi=$("$HERE/vm.sh" landlock "$g") || exit 1
	timeout=${DW_VM_TIMEOUT:-40m}
	case "${pat:-}" in
	native | unprivileged)
		timeout=${DW_VM_TIMEOUT:-3h}
		flags=(-landlock "$abi")
		[ "$pat" = unprivileged ] && flags+=(-unprivileged)
		pat=$(nativeset "${flags[@]}" -v 2>"$TMP/left") || {
			grep -v 'left out' "$TMP/left" >&2
			exit 1
		}
		while read -r l; do
			summary+=("$(printf '%-11s as %-4s %s' "$g" "$as" "${l#nativeset: }")")
		done < <(grep 'Landlock' "$TMP/left")
		;;
	esac
	t0=$(date +%s)
	echo "test-vm: === $g as $as ==="
	"$HERE/vm.sh" test --guest "$g" --as "$as" --timeout "$timeout" "$TREE" "${pat:-}"
	rc=$?
	line=$(printf '%-11s as %-4s exit %3d in %4d s' "$g" "$as" "$rc" $(($(date +%s) - t0)))
	[ $rc = 0 ] || {
		failed=1
		line="$line  FAILED"
	}
	summary+=("$line")
done
echo "test-vm: summary ($(($(date +%s) - start)) s in all):"
printf 'test-vm:   %s\n' "${summary[@]}"
[ $failed = 0 ] && echo "test-vm: all passed"
exit $failed
