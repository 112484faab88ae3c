# The two entry points are `make demo` and `make test`; everything else is a step they depend on.
# Every step is idempotent and cached: a second run on a warm machine rebuilds nothing.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PLAYBOOK := $(BIN)/ansible-playbook
# Control-plane binaries the test harness runs (built from the Go module proxy, cached by version).
CONTROL_PLANE := etcd kube-apiserver kube-controller-manager kwok
# What the tests run besides: helm renders, lints and installs the chart (harness/manifests.py, tests/unit).
TEST_TOOLS := $(CONTROL_PLANE) helm
# What the control-plane scenarios run besides the control plane: Prometheus scrapes the programs (features/metrics),
# kube-scheduler is the fit differential's reference (features/fit), kubectl runs `kubectl gpu` as a plugin
# (features/cli): a scenario that finds one missing fails, it never skips.
# `make test` starts its build in the background first; the `scenarios` step waits for that build or does it.
SCENARIO_TOOLS := prometheus kube-scheduler kubectl
# The control-plane programs at the oldest supported minor (versions.yml kubernetes_oldest_version), for the
# scenarios-oldest step.
OLDEST_TOOLS := kube-apiserver kube-controller-manager kube-scheduler
# What runs against the oldest supported minor too: the differential tests (whose kube-scheduler is the apiserver's
# minor), the control-plane scenarios that touch the API's shape (admission and the chart's policies, gangs: those
# needing the 1.37 gang API are left out there by the tier, the chart's deployment), and the chart's rendered objects
# against that minor's OpenAPI documents (OLDEST_UNIT). The whole tier on both minors would cost about 14 more minutes
# of the cold run; docs/versions.md has the measured budget.
OLDEST_SCENARIOS := features/fit features/admission features/gangs features/deploy
OLDEST_UNIT := tests/unit/testbed/test_chart.py tests/unit/testbed/test_openapi.py
# The browser the board's scenarios drive (harness/browser.py): Debian's packages chromium and chromium-driver.
CHROMIUM := /usr/bin/chromium
CHROMEDRIVER := /usr/bin/chromedriver

# The test-bed's own builds (the node image's binaries and its container runtime, kind, the registry, the storage
# provisioner): `make test` builds them in the background while the tests before the test-bed run, then assembles
# the node image there too (NODE_IMAGE_PHASES of site.yml), so that a cold machine waits less.
TESTBED_TOOLS := kind kubectl kubeadm kubelet kube-proxy coredns registry local-path-provisioner \
  containerd containerd-shim-runc-v2 ctr runc
NODE_IMAGE_PHASES := engine,toolchain,node_image
BACKGROUND_LOG := build/toolchain-background.log

# kube-scheduler is the benchmark's second contender, built at the same Kubernetes version.
BENCH_TOOLS := $(CONTROL_PLANE) kube-scheduler

# The first step of `make demo` and `make test`: every prerequisite the project cannot install itself, each named
# with how to get it, before any long build starts (hack/prereqs.py; it changes nothing).
PREREQS_FOR = $(or $(firstword $(filter test demo,$(MAKECMDGOALS))),demo)

.PHONY: help prereqs venv toolchain scenario-toolchain oldest-toolchain scenarios-oldest browser bench-toolchain lint unit scenarios bench bench-smoke testbed idempotence online test demo teardown clean uninstall uninstall-check

help:
	@echo "make demo       check the prerequisites, install what is needed, run the KinD test-bed end to end (writing"
	@echo "                evidence/) and leave the cluster running: source the env.sh it names to use it"
	@echo "make test       check the prerequisites, install what is needed, run every test: lint, unit, the"
	@echo "                control-plane scenarios (on the newest and the oldest supported Kubernetes), the KinD"
	@echo "                test-bed, a second site.yml that must change nothing,"
	@echo "                the online path and the uninstall"
	@echo "make prereqs    only the prerequisite check (hack/prereqs.py)"
	@echo "make teardown   delete the KinD cluster; keep the registry and the caches"
	@echo "make uninstall  remove everything the test-bed added (PURGE_CACHE=1: the caches too)"
	@echo "make bench      gpu-scheduler vs kube-scheduler (with and without DRA) vs a bare binder, with and without the webhook, on 1000 kwok nodes -> docs/benchmarks.md"

prereqs:
	@$(PYTHON) hack/prereqs.py --for $(PREREQS_FOR)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,testbed,bench,lint,protos]'
	@touch $@

# The kubelet's gRPC message classes (device plugin v1beta1, PodResources v1) from k8s.io/kubelet's api.proto at the
# pinned version: build output under src/, git-ignored, regenerated when the pin changes (hack/protos.py).
PROTOS := src/gpu_scheduling/kubeletapi/SOURCE
$(PROTOS): $(STAMP) versions.yml hack/protos.py
	$(BIN)/python hack/protos.py
	@touch $@

venv: $(STAMP) $(PROTOS)

toolchain:
	$(PYTHON) hack/toolchain.py build $(TEST_TOOLS)
	@$(PYTHON) hack/toolchain.py source kube-apiserver >/dev/null  # the OpenAPI documents the chart is checked against

# Cached by version; while another build of the same component runs (`make test`'s background build), this one waits
# for it and then finds the result cached.
scenario-toolchain:
	$(PYTHON) hack/toolchain.py build $(SCENARIO_TOOLS)

oldest-toolchain:
	$(PYTHON) hack/toolchain.py build --kubernetes oldest $(OLDEST_TOOLS)

bench-toolchain:
	$(PYTHON) hack/toolchain.py build $(BENCH_TOOLS)

# Debian's chromium and chromedriver, the real browser the board's scenarios drive through Selenium (features/board):
# installed with apt-get (sudo when not root) only when either is missing; nothing downloads a browser or a driver.
browser:
	@if [ ! -x $(CHROMIUM) ] || [ ! -x $(CHROMEDRIVER) ]; then \
	  sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y --no-install-recommends chromium chromium-driver; \
	fi

# Every static gate, each clean (exceptions only as a local noqa with its reason): ruff's rules and its formatter,
# mypy --strict on src/, the import layers (pyproject's [tool.importlinter]), ansible-lint's production profile,
# go vet and gofmt for the benchmark's load generator.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/ansible-lint --offline --profile production
	cd bench/loadgen && go vet ./... && test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }

# Unit tests of the pure modules and the webhook program, and the chart (helm lint, helm template, the rendered
# manifests against the pinned Kubernetes OpenAPI schemas). Hypothesis's "ci" profile (tests/conftest.py); a test
# that skips fails the run.
unit: venv toolchain
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest tests

# Gherkin scenarios on a real control plane (etcd, kube-apiserver, kube-controller-manager, kwok), Prometheus and
# a headless Chromium (the board's page).
scenarios: venv toolchain scenario-toolchain browser
	$(BIN)/python -m pytest features --tier controlplane

# The same tier's OLDEST_SCENARIOS against the oldest supported minor's apiserver, controller manager and
# kube-scheduler (hack/toolchain.py: $$GPU_TESTBED_KUBERNETES); etcd, kwok, Prometheus and kubectl are the same builds.
scenarios-oldest: venv toolchain scenario-toolchain oldest-toolchain browser
	GPU_TESTBED_KUBERNETES=oldest HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest $(OLDEST_UNIT)
	GPU_TESTBED_KUBERNETES=oldest $(BIN)/python -m pytest $(OLDEST_SCENARIOS) --tier controlplane

# The benchmark (56 min on 2 cores on 2026-11-29: W1 with the bare binder and the binder with the webhook, W2 with the
# DRA contender, W3 gangs against PodGroups, W4 spread, the pending storm, the webhook):
# writes docs/benchmarks.md and docs/benchmarks/.
bench: venv bench-toolchain
	$(BIN)/python -m bench

# The same benchmark with a few nodes and pods (every workload and contender, a 5 s storm), so that it never
# rots; it asserts that every pod is bound (the storm's: tried, and none bound) and the report is written, and what
# every run must get right (bench/checks.py: W1 on the mapped nodes, no GPU held twice, W3's gangs whole, no board
# flag), never a timing. W3 runs at the smoke's 10 nodes: two gangs (2 and 4 members).
bench-smoke: venv bench-toolchain browser
	$(BIN)/python -m bench --smoke

# The KinD test-bed: cluster, TLS, images, deploy, and the acceptance scenarios on it.
testbed: venv
	$(PLAYBOOK) site.yml

# A second run of site.yml must report changed=0: it takes the existing-cluster path (testbed_cluster: existing with
# the KinD cluster's kubeconfig: no engine, node image, cluster or registry phase; images from the registry, the
# chart, the scenarios). Then a --check --diff run of the first run's arguments must report changed=0 and no diff.
idempotence: venv
	IDEMPOTENCE_SECOND_RUN_ARGS="-e testbed_cluster=existing -e testbed_kubeconfig=$$($(PYTHON) hack/toolchain.py \
	cache-dir)/state/$$($(BIN)/python -c 'import yaml; print(yaml.safe_load(open("inventory/localhost/group_vars/all.yml"))["testbed_cluster_name"])')/kubeconfig" \
	hack/check-idempotent.sh $(PLAYBOOK) site.yml

# Every build the steps need runs in the background, one after another in the order the steps need them (their log:
# $(BACKGROUND_LOG), shown if it fails): the unit tests' tools (lint needs none), the scenarios', the oldest minor's,
# the test-bed's, then the Docker engine and the node image (site.yml's $(NODE_IMAGE_PHASES) phases), which the
# control-plane scenarios leave the cores idle for. A step whose tool is still building waits for that build
# (hack/toolchain.py's lock) or builds it; `browser` runs first, as the engine's packages come from apt too.
test: prereqs venv browser
	@mkdir -p build
	@{ $(PYTHON) hack/toolchain.py build $(TEST_TOOLS) $(SCENARIO_TOOLS) && \
	   $(PYTHON) hack/toolchain.py build --kubernetes oldest $(OLDEST_TOOLS) && \
	   $(PYTHON) hack/toolchain.py build $(filter-out $(TEST_TOOLS) $(SCENARIO_TOOLS),$(TESTBED_TOOLS)) && \
	   $(PLAYBOOK) site.yml --tags $(NODE_IMAGE_PHASES); } >$(BACKGROUND_LOG) 2>&1 & background=$$!; \
	echo "test: building $(TEST_TOOLS) $(SCENARIO_TOOLS), $(OLDEST_TOOLS) at the oldest minor, $(filter-out $(TEST_TOOLS) $(SCENARIO_TOOLS),$(TESTBED_TOOLS)), then the node image in the background (pid $$background, log $(BACKGROUND_LOG))"; \
	$(MAKE) lint unit scenarios scenarios-oldest bench-smoke; status=$$?; \
	if ! wait $$background; then echo "test: the background build failed:"; cat $(BACKGROUND_LOG); exit 1; fi; \
	grep -h '^toolchain: built\|node-image: node image' $(BACKGROUND_LOG) || true; \
	[ $$status -eq 0 ] || exit $$status; \
	$(MAKE) testbed idempotence online uninstall-check

# The online path (testbed_mode: online, what machines that reach the public registries run) with the local registry
# standing in for docker.io and registry.k8s.io: on a one-worker cluster of its own, deleted after (hack/online.yml).
online: venv
	$(PLAYBOOK) hack/online.yml -e @hack/online-vars.yml --skip-tags verify

demo: prereqs venv
	$(PLAYBOOK) site.yml -e testbed_write_evidence=true

teardown: venv
	$(PLAYBOOK) teardown.yml

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build

# Everything the test-bed added to this machine, removed, and what it changed put back (uninstall.yml lists it all):
# the clusters, the registry and its volume, the images, the engine's configuration (from the record
# roles/docker_engine keeps), the Debian packages it installed, the state and TLS files. Keeps the cache of builds;
# PURGE_CACHE=1 removes it too, KEEP_PACKAGES=1 keeps the packages. `make teardown` deletes the cluster only.
uninstall: venv
	$(PLAYBOOK) uninstall.yml $(if $(filter 1 true yes,$(PURGE_CACHE)),-e uninstall_caches=true) \
	  $(if $(filter 1 true yes,$(KEEP_PACKAGES)),-e uninstall_packages=false)

# make test's last step: the full uninstall (caches kept), then hack/footprint.py names anything of the test-bed
# left (against a snapshot taken before: the engine record, the images, the cache), then hack/check-idempotent.sh
# runs the uninstall again (changed=0) and with --check --diff (changed=0, no diff).
uninstall-check: venv
	@snapshot=$$(mktemp -d) && trap 'rm -rf "$$snapshot"' EXIT && \
	$(BIN)/python hack/footprint.py snapshot "$$snapshot" && \
	$(PLAYBOOK) uninstall.yml && \
	$(BIN)/python hack/footprint.py check --snapshot "$$snapshot" && \
	hack/check-idempotent.sh $(PLAYBOOK) uninstall.yml
