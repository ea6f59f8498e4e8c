# `make demo` and `make test` each bring .venv up to date first (idempotent).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Reinstall dependencies only when pyproject.toml changes.
DEPS_STAMP := $(VENV)/.deps-$(shell sha1sum pyproject.toml 2>/dev/null | cut -c1-12)

.PHONY: venv demo test lint typecheck pytest clean

$(DEPS_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[dev]' --config-settings editable_mode=strict > $(VENV)/install.log 2>&1 \
	  || { cat $(VENV)/install.log; exit 1; }
	rm -f $(VENV)/.deps-*
	touch $@

# The strict editable install is a link tree (so type checkers and pytest see the
# mapped packages); refresh it every time so new modules are picked up.
venv: $(DEPS_STAMP)
	@$(PY) -m pip install -q --no-deps --no-build-isolation -e . --config-settings editable_mode=strict \
	  > $(VENV)/editable.log 2>&1 || { cat $(VENV)/editable.log; exit 1; }

# The testbed demo needs root (network namespaces); without, it says why and runs the loopback demo.
demo: venv
	$(VENV)/bin/dlcp demo --testbed --model mlp --epochs 1 --samples 4096

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy reads the link tree, where host/ etc. sit at their dlcp.* import paths.
typecheck: venv
	MYPYPATH=$$(ls -td build/__editable__* | head -n 1) $(VENV)/bin/mypy -p dlcp

pytest: venv venv-p4rt-shell
	$(VENV)/bin/pytest -q

test: lint typecheck pytest test-mxnet

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache

# Compile the P4 programs into build/p4/ with whichever of p4c-bm2-ss, p4test and
# bf-p4c are installed (PATH or $DLCP_P4_BIN_DIR); see docs/switch.md.
.PHONY: p4
p4: venv
	$(VENV)/bin/dlcp p4 build

# MXNet 1.9.1 imports only with numpy<1.24, so its shim is tested in its own venv,
# .venv-mxnet (the `mxnet` extra plus pytest), refreshed like .venv.
MX_VENV  := .venv-mxnet
MX_PY    := $(MX_VENV)/bin/python
MX_STAMP := $(MX_VENV)/.deps-$(shell sha1sum pyproject.toml 2>/dev/null | cut -c1-12)
# libmxnet.so links the system's libgomp and libquadmath (it bundles only openblas and
# gfortran): installed here when missing, and only as root.
MX_DEBS  := libgomp1 libquadmath0

.PHONY: mxnet-debs venv-mxnet test-mxnet

mxnet-debs:
	@missing=$$(for p in $(MX_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing $$missing (needed by libmxnet.so)"; \
	  apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; \
	fi

$(MX_STAMP): pyproject.toml
	test -x $(MX_PY) || $(PYTHON) -m venv $(MX_VENV)
	$(MX_PY) -m pip install -q --upgrade pip setuptools wheel
	$(MX_PY) -m pip install -q -e '.[mxnet]' 'pytest>=8' --config-settings editable_mode=strict \
	  > $(MX_VENV)/install.log 2>&1 || { cat $(MX_VENV)/install.log; exit 1; }
	rm -f $(MX_VENV)/.deps-*
	touch $@

# The same link tree as .venv's (build/__editable__*), refreshed for new modules.
venv-mxnet: mxnet-debs $(MX_STAMP)
	@$(MX_PY) -m pip install -q --no-deps --no-build-isolation -e . --config-settings editable_mode=strict \
	  > $(MX_VENV)/editable.log 2>&1 || { cat $(MX_VENV)/editable.log; exit 1; }

# Skips (and says why) only when mxnet itself cannot be imported on this machine.
test-mxnet: venv-mxnet
	@if $(MX_PY) -c 'import mxnet' > $(MX_VENV)/import.log 2>&1; then \
	  $(MX_VENV)/bin/pytest -q -m mxnet tests/mxnet_shim; \
	else \
	  echo "SKIPPED test-mxnet: mxnet does not import in $(MX_VENV):"; tail -n 3 $(MX_VENV)/import.log; \
	fi

# p4runtime-shell pins protobuf<3.21 and IPython 7.31, which DLCP's own venv (finsy, protobuf 6)
# cannot hold: it gets its own venv, .venv-p4rt-shell, with nothing else in it (not even dlcp).
# `dlcp switch shell ADDR` runs it; tests/p4runtime/test_shell.py drives it against the software switch.
P4SH_PYTHON ?= python3.11
P4SH_VENV   := .venv-p4rt-shell
P4SH_PY     := $(P4SH_VENV)/bin/python
P4SH_REQ    := p4runtime-shell==0.0.6
P4SH_STAMP  := $(P4SH_VENV)/.deps-$(shell echo '$(P4SH_REQ)' | sha1sum | cut -c1-12)

.PHONY: venv-p4rt-shell

$(P4SH_STAMP):
	test -x $(P4SH_PY) || $(P4SH_PYTHON) -m venv $(P4SH_VENV)
	$(P4SH_PY) -m pip install -q '$(P4SH_REQ)' > $(P4SH_VENV)/install.log 2>&1 \
	  || { cat $(P4SH_VENV)/install.log; exit 1; }
	rm -f $(P4SH_VENV)/.deps-*
	touch $@

venv-p4rt-shell: $(P4SH_STAMP)
