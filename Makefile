# llmhost: the embedded default (a local Debian 12 LXC guest) and the test suite.
# Needs root (lxc, bridges) on Debian 12. Every target installs what it needs.

SHELL := /bin/bash
UV_VERSION := 0.13.9
UV := $(shell command -v uv 2>/dev/null || echo $(CURDIR)/.tools/bin/uv)
VENV := .venv
PY := $(VENV)/bin/python
PYINFRA := $(VENV)/bin/pyinfra
SANDBOX_IP := 10.99.0.12
APT_PACKAGES := lxc lxc-templates debootstrap rsync wget openssh-client iptables \
	apt-cacher-ng python3 python3-venv ca-certificates

.PHONY: deps sandbox-up sandbox-down sandbox-status serve demo test test-unit lint converge-bench

deps: $(VENV)/.synced
	@dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || { \
	  echo "[deps] installing: $(APT_PACKAGES)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    --no-install-recommends $(APT_PACKAGES); }

$(UV):
	@dpkg -s python3-venv >/dev/null 2>&1 || python3 -m venv --help >/dev/null 2>&1 || \
	  { apt-get update -q && apt-get install -y -q python3-venv; }
	python3 -m venv .tools && .tools/bin/pip install -q uv==$(UV_VERSION)

$(VENV)/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen
	@touch $@

sandbox-up: deps
	$(PY) -m llmhost.cli sandbox up

sandbox-down:
	$(PY) -m llmhost.cli sandbox down

sandbox-status:
	$(PY) -m llmhost.cli sandbox status

serve: sandbox-up
	$(PYINFRA) -y inventory/sandbox.py deploys/serve.py

demo: serve
	$(PY) -m llmhost.cli ask "Write one line about GPUs."

test: sandbox-up
	$(PY) -m pytest -p no:cacheprovider -v tests/unit tests/integration tests/state \
	  --hosts=ssh://$(SANDBOX_IP) --ssh-config=.sandbox/ssh_config
	$(PY) benchmarks/converge.py

test-unit: deps
	$(PY) -m pytest -q tests/unit

lint: deps
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
