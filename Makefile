# deathwatch — build, test, benchmark.
#
#   make build   static bin/watcher and bin/supervisor
#   make install the two into $(PREFIX)/bin (PREFIX=/usr/local; DESTDIR too)
#   make cross   the supervisor for macOS (arm64, amd64) and Windows (amd64)
#   make test    THE test command (CI's .ci/run runs exactly this): provisions
#                the machine (kernel-tests/provision.sh, needs root; it
#                starts the Kubernetes test cluster in the background),
#                checks gofmt and go vet, then runs its lanes side by side:
#                the unit tests, the kernel tests but the Kubernetes ones and
#                a short fixed fuzz run of the shared framing targets (lane
#                main); the Kubernetes kernel tests once the cluster is up
#                (lane kubernetes); the native runtime in qemu guests on
#                pure cgroup v2 (lane vm, make test-vm)
#   make bench   benchmarks (figures, not pass/fail timings); with
#                DEATHWATCH_BENCH_BASE=DIR (the bin of an earlier commit's
#                make build) each row with a baseline runs both builds,
#                interleaved, and says this / base with its noise
#   make demo    the main job: bin/supervisor demo
#   make fuzz    longer fuzz runs (FUZZTIME=5m make fuzz)
#   make image   the FROM scratch watcher image, offline (ENGINE=podman make image)
#   make busybox-image  deathwatch/busybox: the host's static busybox as an
#                image, offline, for a first box on an engine
#   make test-fresh    provision.sh --reset (the machine as if never
#                      provisioned, packages aside), then make test twice
#   make test-loaded   make test with LOAD busy loops beside it (default 4:
#                      load ~6 on 2 cores), as a busy CI machine would be
#   make clean         bin/
#   make clean-images  the kernel tests' images (docker, podman, rootless podman)
#   make k8s-up        the single-node Kubernetes test cluster (built on first use)
#   make kernel-k8s    the Kubernetes kernel tests alone (waits for the cluster)
#   make k8s-down      stop it and remove its state (the build cache stays)
#   make test-vm       every native kernel test and the CLI checks in qemu
#                      guests on pure cgroup v2 (Debian 6.1 without and with
#                      systemd, bullseye 5.10), as root and as an
#                      unprivileged user (kernel-tests/vm/test-vm.sh); make
#                      test's lane vm runs a part of it (test-vm-lane)

# Go lives in /usr/local/go on the machines this runs on (a Go already on
# PATH wins); the tests run root's tools (runuser, chroot, dockerd, ...),
# which a minimal PATH may lack.
export PATH := $(PATH):/usr/local/go/bin:/usr/local/sbin:/usr/sbin:/sbin
GO      ?= go
ENGINE  ?= docker
IMAGE   ?= deathwatch/watcher:latest
BUSYBOX_IMAGE ?= deathwatch/busybox:latest
PREFIX  ?= /usr/local

# Static, reproducible, no PIE: without cgo, PIE needs a dynamic loader
# and would not run in a FROM scratch image.
BUILDFLAGS := -trimpath -ldflags "-s -w -buildid="

# Both binaries are built without Go 1.26's Green Tea GC, the collector
# of Go 1.25 and before. PID 1 of every box idles with a heap of a few
# hundred objects and rarely, if ever, collects: Green Tea keeps the
# mark bits of each small-object span inside the span, so every span
# the watcher touches is resident in whole (two 4 KiB pages), where the
# older collector touches the one page its objects use; the supervisor
# pays the same first touch on every start, where a page fault is the
# main cost (kernel-tests/bench TestBenchIdleRSS prints the resident
# sizes). Keep in step with ktest.BuildGOEXPERIMENT and the Dockerfile.
# Go 1.27 is to drop the opt-out, so it is asked of Go 1.26 only (another
# Go builds with its default collector rather than fail on an unknown
# GOEXPERIMENT).
BUILD_GOEXPERIMENT := $(if $(filter go1.26 go1.26.%,$(shell $(GO) env GOVERSION 2>/dev/null)),nogreenteagc,)

# The suite must finish within CI's limit (90 min) on 2 cores; these are
# upper bounds for a hung test, not expectations: the kernel tests' bound
# leaves room for a loaded host (make test-loaded) and still ends before
# CI's limit with provisioning, unit tests and fuzzing.
UNIT_TIMEOUT   ?= 10m
KERNEL_TIMEOUT ?= 70m
FUZZ_CI_TIME   ?= 20s
FUZZTIME       ?= 2m
FUZZ_TARGETS   := FuzzReader FuzzSpec FuzzCopyDecoders FuzzSHA256

# Kernel tests share the engines, the cgroup tree and the 2 cores: one
# package at a time (-p 1), never from the test cache (-count=1: a cached
# pass says nothing about this machine), verbose (the tests print measured
# timings with t.Logf). kernel-tests/bench runs only under make bench.
UNIT_PKGS   = $(shell $(GO) list ./... | grep -v '/kernel-tests')
KERNEL_PKGS = $(shell $(GO) list ./kernel-tests/... | grep -v '/kernel-tests/bench')
# The Kubernetes kernel tests, by name (ktest.K8sTests says the same; a
# test that uses the cluster under another name fails in lane main).
K8S_TESTS   := ^Test(K8s|Kubernetes|EscapeKubernetes)
K8S_TIMEOUT ?= 100m

.PHONY: k8s-up k8s-down test-vm test-vm-lane all build test test-fresh test-loaded provision-reset provision fmt-check vet unit kernel kernel-k8s fuzz-ci fuzz bench demo install image busybox-image clean clean-images

all: build

build:
	@mkdir -p bin
	CGO_ENABLED=0 GOEXPERIMENT=$(BUILD_GOEXPERIMENT) $(GO) build $(BUILDFLAGS) -o bin/watcher ./cmd/watcher
	CGO_ENABLED=0 GOEXPERIMENT=$(BUILD_GOEXPERIMENT) $(GO) build $(BUILDFLAGS) -o bin/supervisor ./cmd/supervisor

test: provision fmt-check vet build cross
	@$(MAKE) --no-print-directory lanes
	@echo "make test: all passed"

# make test's lanes run side by side; the steps of a lane (LANE_NAME_STEPS,
# make targets) run one after the other and it stops at the first that
# fails. Lane main prints as it goes, every other lane into
# bin/lanes/NAME.log, printed when it ends. A lane must not share what
# another uses (an engine's boxes, fixed names; TestMain's leak check
# looks only at its own lane's engines: each kernel-test process says its
# lane in DEATHWATCH_TEST_LANE). To add a lane: LANE_NAME_STEPS below and
# NAME in SIDE_LANES.
LANE_main_STEPS       := unit kernel fuzz-ci
LANE_kubernetes_STEPS := kernel-k8s
LANE_vm_STEPS         := test-vm-lane
SIDE_LANES := kubernetes vm
LANE_DIR   := bin/lanes

.PHONY: lanes $(addprefix lane-,main $(SIDE_LANES)) $(addprefix side-,$(SIDE_LANES))

lanes:
	@mkdir -p $(LANE_DIR)
	@$(MAKE) --no-print-directory -k -j$(words main $(SIDE_LANES)) lane-main $(addprefix side-,$(SIDE_LANES))

$(addprefix lane-,main $(SIDE_LANES)): lane-%:
	@for s in $(LANE_$*_STEPS); do $(MAKE) --no-print-directory $$s || exit 1; done

# side-NAME runs lane-NAME into its log and prints the log when done.
$(addprefix side-,$(SIDE_LANES)): side-%:
	@echo "make test: lane $* started (log $(LANE_DIR)/$*.log)"
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory lane-$* >$(LANE_DIR)/$*.log 2>&1; rc=$$?; \
	echo "==== make test: lane $* (exit $$rc after $$(( $$(date +%s) - start )) s) ===="; cat $(LANE_DIR)/$*.log; \
	echo "==== make test: lane $* $$(if [ $$rc = 0 ]; then echo passed; else echo FAILED; fi) ===="; exit $$rc

# The supervisor runs where Docker Desktop and sbx controllers run: it
# must build for macOS and Windows (the docker runtime; native is Linux's).
CROSS_TARGETS := darwin/arm64 darwin/amd64 freebsd/amd64 windows/amd64

.PHONY: cross
cross:
	@for t in $(CROSS_TARGETS); do \
		echo "build ./cmd/supervisor for $$t"; \
		CGO_ENABLED=0 GOEXPERIMENT=$(BUILD_GOEXPERIMENT) GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) build $(BUILDFLAGS) -o /dev/null ./cmd/supervisor || exit 1; \
	done

provision:
	kernel-tests/provision.sh

provision-reset:
	kernel-tests/provision.sh --reset

k8s-up:
	kernel-tests/k8s/cluster.sh build
	kernel-tests/k8s/cluster.sh up

k8s-down:
	kernel-tests/k8s/cluster.sh down

# The first-run paths, without a fresh machine: reset what provisioning
# made, then the whole suite twice in a row (the second run is the
# machine that already ran it once).
test-fresh: provision-reset
	@for i in 1 2; do \
		echo "make test-fresh: run $$i of 2"; \
		start=$$(date +%s); \
		$(MAKE) --no-print-directory test || exit 1; \
		echo "make test-fresh: run $$i passed in $$(( $$(date +%s) - start )) s"; \
	done

# make test on a busy machine: LOAD busy loops run beside it and are
# stopped however it ends.
LOAD ?= 4
test-loaded:
	@pids=""; for i in $$(seq 1 $(LOAD)); do sh -c 'while :; do :; done' & pids="$$pids $$!"; done; \
	trap 'kill $$pids 2>/dev/null' EXIT INT TERM; \
	echo "make test-loaded: $(LOAD) busy loops (pids$$pids)"; \
	start=$$(date +%s); \
	$(MAKE) --no-print-directory test; rc=$$?; \
	echo "make test-loaded: exit $$rc after $$(( $$(date +%s) - start )) s, load $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	exit $$rc

fmt-check:
	@files=$$(git ls-files --cached --others --exclude-standard -- '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'); \
	out=$$(gofmt -l $$files); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi; \
	echo "gofmt: ok"

vet:
	$(GO) vet ./...
	@# The sbx runtime drives Docker Sandboxes from macOS and Windows too.
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) vet ./supervisor/runtime/sbx
	CGO_ENABLED=0 GOOS=windows GOARCH=amd64 $(GO) vet ./supervisor/runtime/sbx

unit:
	$(GO) test -timeout $(UNIT_TIMEOUT) $(UNIT_PKGS)

kernel:
	DEATHWATCH_TEST_LANE=main $(GO) test -count=1 -p 1 -v -timeout $(KERNEL_TIMEOUT) -skip '$(K8S_TESTS)' $(KERNEL_PKGS)

# The tests wait for the cluster provision.sh brings up in the background
# (cluster.sh wait) and fail when it failed.
kernel-k8s:
	DEATHWATCH_TEST_LANE=kubernetes $(GO) test -count=1 -p 1 -v -timeout $(K8S_TIMEOUT) -run '$(K8S_TESTS)' ./kernel-tests

# The hosts users have (pure cgroup v2, with and without systemd, kernels
# back to 5.10) in qemu guests, one after the other: a lane of its own,
# independent of the engines and the cluster, that needs only provision
# (the guests' images) and build. Runs every guest to the end and fails
# when any run failed.
test-vm: build
	kernel-tests/vm/test-vm.sh $(CURDIR)

# make test's VM lane: what only a guest can show, short enough for a
# TCG guest beside the other lanes on 2 cores (make test-vm, the whole
# native set in every guest, runs far longer): on plain v2 as root the
# v2 cgroup tests (the agent's sub-cgroup and the watcher's reserve, the
# agent's ways out of its cgroup, the delegated parent); under systemd
# as the user the same from the user's own session (the delegated
# subtree it finds by itself); on 5.10 the CLI checks (native refused).
# Yama's ptrace_scope 3 in every guest: nothing of ours may need ptrace.
VM_LANE_ROOT := ^(TestEscapeOOM|TestEscapeCgroupLeave|TestNativeCgroupV2|TestNativeUnprivilegedDelegatedCgroup|TestNativeMemoryLimit)$$
VM_LANE_USER := ^(TestEscapeCgroupLeave|TestNativeUnprivileged|TestNativeUnprivilegedDelegatedCgroup)$$
test-vm-lane: build
	DW_VM_SYSCTL=kernel.yama.ptrace_scope=3 DW_VM_PLAN='v2:root:$(VM_LANE_ROOT) v2-systemd:user:$(VM_LANE_USER) 5.10:root' kernel-tests/vm/test-vm.sh $(CURDIR)

# A short, fixed fuzz run of the framing and spec decoders (the seed
# corpus in shared/testdata/fuzz runs in `unit` as ordinary tests too).
fuzz-ci:
	@for f in $(FUZZ_TARGETS); do \
		echo "fuzz $$f for $(FUZZ_CI_TIME)"; \
		$(GO) test ./shared -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZ_CI_TIME) || exit 1; \
	done
	$(GO) test ./supervisor/runtime/sbx -run '^$$' -fuzz '^FuzzParseSandboxList$$' -fuzztime $(FUZZ_CI_TIME)
	$(GO) test ./supervisor/runtime/sbx -run '^$$' -fuzz '^FuzzParsePolicyList$$' -fuzztime $(FUZZ_CI_TIME)

fuzz:
	@for f in $(FUZZ_TARGETS); do \
		echo "fuzz $$f for $(FUZZTIME)"; \
		$(GO) test ./shared -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

# The benchmarks live in kernel-tests/bench as TestBench* functions that
# run only with DEATHWATCH_BENCH=1; they print figures and ratios.
# DEATHWATCH_BENCH_BASE=DIR compares against a base build (the package
# doc of kernel-tests/bench says which rows).
bench: provision build
	@if [ ! -d kernel-tests/bench ]; then echo "make bench: kernel-tests/bench does not exist yet"; exit 1; fi
	DEATHWATCH_BENCH=1 $(GO) test -count=1 -p 1 -timeout 60m -run '^TestBench' -v ./kernel-tests/bench/...

demo: build
	./bin/supervisor demo

# The watcher image without a registry: bin/watcher copied into FROM
# scratch (the top-level Dockerfile does the same with a golang builder
# stage for machines that can pull golang).
image: build
	$(ENGINE) build -f image/watcher.Dockerfile -t $(IMAGE) bin

# A shell image without a registry: the host's static busybox (Debian's
# busybox-static) alone in a FROM scratch image, applets installed as
# links. The build context is a folder of its own holding only the binary.
busybox-image:
	@bb=$$(command -v busybox) || { echo "make busybox-image: busybox is not installed (apt-get install busybox-static)"; exit 1; }; \
	ctx=$$(mktemp -d) && cp "$$bb" "$$ctx/busybox" && \
	$(ENGINE) build -q -f image/busybox.Dockerfile -t $(BUSYBOX_IMAGE) "$$ctx" >/dev/null; rc=$$?; rm -rf "$$ctx"; \
	[ $$rc = 0 ] && echo "built $(BUSYBOX_IMAGE) with $(ENGINE)"; exit $$rc

# The two static binaries into $(DESTDIR)$(PREFIX)/bin; the supervisor
# finds the watcher beside itself.
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 bin/watcher bin/supervisor $(DESTDIR)$(PREFIX)/bin/

clean:
	rm -rf bin

# Every build of the watcher gets its own test image (tagged by content);
# this removes them all from the three image stores.
clean-images:
	-docker images -q deathwatch-test | sort -u | xargs -r docker rmi -f
	-podman images -q localhost/deathwatch-test | sort -u | xargs -r podman rmi -f
	-cd / && runuser -u dwtest -- env XDG_RUNTIME_DIR=/run/user/2345 podman images -q localhost/deathwatch-test | sort -u | \
		xargs -r runuser -u dwtest -- env XDG_RUNTIME_DIR=/run/user/2345 podman rmi -f
