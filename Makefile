# cluster_tests: `make demo` runs the suite against a simulated 4-node cluster; `make test` runs
# the project's own tests. Both run `make setup` first, which is idempotent.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STATE ?= .sim/demo
NODES ?= 3
# slurm*/munge: the real Slurm the tests run --transport srun under (fixtures/sim/slurm.py); their
# services are kept from starting at install (policy-rc.d, removed after if made here)
APT_PACKAGES := openssh-server openssh-client pdsh iptables iproute2 iperf3 procps psmisc iputils-ping chromium \
  slurmctld slurmd slurm-client munge
# DS_ACCELERATOR=cpu belongs to the simulated cluster only: its nodes' ~/.bashrc sets it
# (fixtures/sim/files.py) and the project's tests set it where they start DeepSpeed themselves.

.PHONY: setup apt venv demo test test-unit lint clean sim-up sim-down

setup: apt venv

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; made=""; \
	  if [ ! -e /usr/sbin/policy-rc.d ]; then \
	    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; made=1; \
	  fi; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; rc=$$?; \
	  if [ -n "$$made" ]; then rm -f /usr/sbin/policy-rc.d; fi; exit $$rc; \
	fi

# torch is pinned: 2.13.0 is the CPU build on this machine's disk; an unpinned torch is GBs of CUDA.
venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0 2>&1 | grep -v '^WARNING: Location' || true
	$(PY) -m pip install -q --disable-pip-version-check -e '.[train,dev,stacks]' pytest-html 2>&1 | grep -v '^WARNING: Location' || true
	$(PY) -c 'import torch, deepspeed, paramiko, testinfra, xdist, cluster_tests.plugin'
	touch $@

# the launch the demo checks: examples/train/, started from the repository's root (the launch
# directory, which every simulated node sees, as an NFS home)
DEMO_LAUNCH := deepspeed --hostfile $(STATE)/hostfile examples/train/train.py \
  --deepspeed_config examples/train/ds_config.json
demo: setup
	@rm -rf reports/demo; mkdir -p reports
	$(PY) -m fixtures.sim up --nodes $(NODES) --state $(STATE)
	@rc=0; PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/cluster-tests \
	  --ssh-config $(STATE)/ssh_config --output-dir $(abspath $(STATE))/shared \
	  --junitxml=reports/junit.xml -- $(DEMO_LAUNCH) || rc=$$?; \
	$(PY) -m fixtures.sim down --state $(STATE) >/dev/null; exit $$rc

# The unit tests on both cores (pytest-xdist); then the end-to-end tests on two workers, each
# with a simulated cluster of its own (a test file stays on one worker: its module's sims and
# the phases its tests share); then, one at a time, those that need the machine to themselves
# (marker `alone`: make demo loads both cores; the bandwidth comparisons need them quiet).
# pytest caches the modules it rewrites (the plugin's, the tests') as bytecode, which
# PYTHONDONTWRITEBYTECODE would forbid: each of the hundreds of suite runs the tests start
# would then parse and rewrite them all again.
E2E := $(PY) -m pytest tests/e2e -p no:cacheprovider -q -x --timeout=900
test: export PYTHONDONTWRITEBYTECODE=
test: setup
	$(PY) -m pytest tests/unit -p no:cacheprovider -q -x -n 2 --timeout=900
	$(E2E) -n 2 --dist worksteal -m "not alone"
	$(E2E) -m alone

# the unit tests alone (no simulated cluster, about 2 minutes)
test-unit: setup
	$(PY) -m pytest tests/unit -p no:cacheprovider -q -n 2 --timeout=900

lint: setup
	$(VENV)/bin/ruff check cluster_tests fixtures tests bench
	$(VENV)/bin/mypy

sim-up: setup
	$(PY) -m fixtures.sim up --nodes $(NODES) --state $(STATE)

sim-down:
	$(PY) -m fixtures.sim down --state $(STATE)

clean: sim-down
	rm -rf $(VENV) .sim reports/*.xml reports/*.html reports/*.json
