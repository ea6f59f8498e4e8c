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

demo: venv
	$(VENV)/bin/dlcp demo

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy reads the link tree, where host/ etc. sit at their dlcp.* import paths.
typecheck: venv
	MYPYPATH=$$(ls -td build/__editable__* | head -n 1) $(VENV)/bin/mypy -p dlcp

pytest: venv venv-sim
	$(VENV)/bin/pytest -q

test: lint typecheck pytest test-mxnet

# The packet simulator's engine, the `sim` extra (ns3 wheel with cppyy: about 480 MB and
# 2 min to install), goes into .venv itself rather than a venv of its own: it shares
# every dependency with the main install and conflicts with none, so one venv runs the
# whole suite and mypy sees dlcp.simulations with its real imports. `make venv` stays
# light; `make test` adds it once per pyproject change.
SIM_STAMP := $(VENV)/.sim-$(shell sha1sum pyproject.toml 2>/dev/null | cut -c1-12)

.PHONY: venv-sim
venv-sim: $(SIM_STAMP)

$(SIM_STAMP): $(DEPS_STAMP)
	$(PY) -m pip install -q -e '.[dev,sim]' --config-settings editable_mode=strict > $(VENV)/install-sim.log 2>&1 \
	  || { cat $(VENV)/install-sim.log; exit 1; }
	rm -f $(VENV)/.sim-*
	touch $@

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
