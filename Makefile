# llmhost: the embedded default (a local Debian 12 LXC guest) and the test suite.
# Needs root (lxc, bridges) on Debian 12. Every target installs what it needs.

SHELL := /bin/bash
UV_VERSION := 0.13.9
UV := $(shell command -v uv 2>/dev/null || echo $(CURDIR)/.tools/bin/uv)
VENV := .venv
PY := $(VENV)/bin/python
PYINFRA := $(VENV)/bin/pyinfra
SANDBOX_IP := 10.99.0.12
STANDIN_IP := 10.99.0.13
PYTEST := $(PY) -m pytest -p no:cacheprovider
APT_PACKAGES := lxc lxc-templates debootstrap rsync wget openssh-client iptables \
	apt-cacher-ng python3 python3-venv ca-certificates

.PHONY: deps sandbox-up sandbox-down sandbox-status standin-up standin-down fleet-up fleet-down fleet-bench site serve host demo \
	test test-unit test-vm test-language bench bench-fidelity lint golden locks

deps: $(VENV)/.synced
	@dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || { \
	  echo "[deps] installing: $(APT_PACKAGES)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    --no-install-recommends $(APT_PACKAGES); }

$(UV):
	@dpkg -s python3-venv >/dev/null 2>&1 || python3 -m venv --help >/dev/null 2>&1 || \
	  { apt-get update -q && apt-get install -y -q python3-venv; }
	python3 -m venv .tools && .tools/bin/pip install -q uv==$(UV_VERSION)

# Bytecode compiled once here: pyinfra starts in half the time where PYTHONDONTWRITEBYTECODE
# is set (every run would compile ~800 modules again; benchmarks/converge.py measures it).
$(VENV)/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --compile-bytecode
	$(VENV)/bin/python -m compileall -q llmhost deploys >/dev/null
	@touch $@

sandbox-up: deps
	$(PY) -m llmhost.cli sandbox up

sandbox-down:
	$(PY) -m llmhost.cli sandbox down

sandbox-status:
	$(PY) -m llmhost.cli sandbox status

# A second container standing in for the Proxmox host (its files; H200 captures for facts).
standin-up: sandbox-up
	$(PY) -m llmhost.cli standin up

standin-down:
	$(PY) -m llmhost.cli standin down

# The sandbox as a fleet: a second serving guest, copied from the first (about a minute),
# pinned to the other core, behind the stand-in's router. `make site` then rolls a switch
# through both; `make fleet-down` makes it one guest again.
fleet-up: standin-up
	$(PY) -m llmhost.cli replica up
	$(PY) -m llmhost.cli site inventory/sandbox.py -y

fleet-down:
	$(PY) -m llmhost.cli replica down
	$(PY) -m llmhost.cli site inventory/sandbox.py -y

# The fleet's benchmark (docs/benchmarks.md): brings the second guest up and down itself.
fleet-bench: standin-up
	$(PY) benchmarks/fleet.py

# The sandbox is a site like inventory/lab.py: the same commands a real site runs.
# Two pyinfra runs (llmhost/site_run.py): the Proxmox host, starting a stopped guest, then site.py.
site: standin-up
	$(PY) -m llmhost.cli site inventory/sandbox.py -y

host: standin-up
	$(PYINFRA) -y inventory/sandbox.py deploys/host.py

serve: standin-up
	$(PYINFRA) -y inventory/sandbox.py deploys/serve.py

demo: site
	$(PY) -m llmhost.cli ask "Write one line about GPUs."

# The suite as timed phases (tests/run_phases.py): each phase's duration and the machine's
# speed that day printed and saved under results/make-test/; a warning past 40 minutes. The
# phases that judge speed run alone first; the GRUB VM then runs beside the rest at idle CPU
# priority (docs/testing.md says why).
# `make test PHASES="unit integration/test_switch"` runs only the phases starting so.
# It starts from the sandbox of one guest and a freshly reset stand-in, whatever an
# interrupted run (or a `make fleet-up`) left: the fleet's copy is removed first, and a
# failed switch the guest remembers is forgotten (llmhost/testbed/suite_start.py: a guest that
# something outside stops meanwhile is started again); its deploys write to a results directory
# of their own (results/make-test/suite-<time>), so a user's baselines never judge it.
test: sandbox-up standin-up
	$(PY) -m llmhost.cli sandbox test-start
	$(PY) tests/run_phases.py $(addprefix --only ,$(PHASES))

# Language-level correctness on a real model from PyPI (SmolLM2-135M; ~3 minutes; in make test).
test-language: sandbox-up
	$(PYTEST) -v tests/language

# deploys/host.py on a Debian 12 VM booted through GRUB under QEMU TCG: real update-grub,
# a real reboot, /proc/cmdline, sysctl and lsmod checked after it. About 8 minutes.
test-vm: sandbox-up
	tests/vm/build_vm.sh stop
	tests/vm/build_vm.sh build
	tests/vm/build_vm.sh start
	$(PYTEST) -v tests/vm; rc=$$?; tests/vm/build_vm.sh stop; exit $$rc

# The benchmarks make test runs (also its phases bench/converge, bench/switch_downtime).
bench: sandbox-up
	$(PY) benchmarks/converge.py
	$(PY) benchmarks/switch_downtime.py

# The gate's own path against `vllm bench serve` typed by hand, on purpose (~5-20 minutes;
# not in make test: docs/benchmarks.md says why). --gate makes a cell outside 0.97-1.03 exit 1.
bench-fidelity: sandbox-up
	$(PY) benchmarks/bench_fidelity.py $(FIDELITY_ARGS)

test-unit: deps
	$(PY) -m pytest -q tests/unit

# The vLLM venvs' locks (locks/, committed): `uv pip compile --generate-hashes` of the pin each
# group's group_data gives, for the guests' Python and platform. Needs the upstream indexes
# (PyPI, wheels.vllm.ai for a CUDA variant) and PIP_FIND_LINKS; `make locks LOCK_GROUPS=sandbox`
# for one. Then review `git diff locks/` and commit: a changed lock resyncs the guests' venvs.
LOCK_GROUPS ?= sandbox lxc_guests kvm_guests
LOCK_ROUTER ?= 0.1.17
locks: $(VENV)/.synced
	$(PY) -m llmhost.locks compile --uv $(UV) $(addprefix --group ,$(LOCK_GROUPS)) \
	  $(if $(LOCK_ROUTER),--router $(LOCK_ROUTER))

# Rewrite tests/golden/ from what the code renders now, after a reviewed change (tests only
# compare); then review `git diff tests/golden`.
golden: $(VENV)/.synced
	$(PY) tests/update_golden.py

lint: deps
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
