# `make demo` and `make test` each bring .venv up to date first (idempotent).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Reinstall dependencies only when pyproject.toml changes.
DEPS_STAMP := $(VENV)/.deps-$(shell sha1sum pyproject.toml 2>/dev/null | cut -c1-12)

.PHONY: venv demo test lint typecheck pytest clean

# The C fast path (host/_fastpath*.c, module dlcp.host._fastpath) is an optional
# extension: `pip install .` succeeds without a C compiler, and the transport then
# runs its numpy path. This checkout's tools need it: the strict editable install
# fails without it (setuptools cannot link a module that was not built), and
# `make test` (CI) runs its tests. FASTPATH_HELP says why it is missing (shell).
FASTPATH_HELP = cc=$$($(PY) -c 'import os, sysconfig; print((os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0])'); \
  inc=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
  if ! command -v "$$cc" > /dev/null; then \
    echo "  No C compiler: '$$cc' is not on PATH. Install one (Debian/Ubuntu: apt-get install gcc python3-dev)."; \
  elif [ ! -f "$$inc/Python.h" ]; then \
    echo "  No Python headers: $$inc/Python.h is missing (Debian/Ubuntu: apt-get install python3-dev)."; \
  else \
    echo "  '$$cc' and Python.h are there: the module failed to build or to load (see above; make venv rebuilds it)."; \
  fi; \
  echo "  Then run make again. (DLCP itself installs without it, \`pip install .\`, and runs its numpy path.)"
# After a failed pip run whose log is $(1): the log, then the diagnosis if the C module failed.
PIP_FAILED = { cat $(1); if grep -q 'building extension "dlcp.host._fastpath" failed' $(1); then \
  echo "make: the C fast path dlcp.host._fastpath could not be built:"; $(FASTPATH_HELP); fi; exit 1; }

$(DEPS_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	@$(PY) -m pip install -q -e '.[dev]' --config-settings editable_mode=strict > $(VENV)/install.log 2>&1 \
	  || $(call PIP_FAILED,$(VENV)/install.log)
	rm -f $(VENV)/.deps-*
	touch $@

# The strict editable install is a link tree of dlcp/ alone (host/ and the other top-level
# folders never become importable under their own names); refresh it every time so new
# modules are picked up.
venv: $(DEPS_STAMP)
	@$(PY) -m pip install -q --no-deps --no-build-isolation -e . --config-settings editable_mode=strict \
	  > $(VENV)/editable.log 2>&1 || $(call PIP_FAILED,$(VENV)/editable.log)

# The testbed demo needs root (network namespaces), or without it a user namespace of its own; where
# neither can be had, it says why and runs the loopback demo.
demo: venv
	$(VENV)/bin/dlcp demo --testbed --model mlp-wide --epochs 1 --samples 3072 --loss-bound 0.02

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy reads the source tree: dlcp/host, dlcp/controller, dlcp/testbed, dlcp/simulations and
# dlcp/apps are symlinks to the top-level folders, so every package sits at its import path.
typecheck: venv
	$(VENV)/bin/mypy -p dlcp

# make test runs the C path's tests, so the module must import (-P: not from the
# source folder ./dlcp). A stale build kept by a failed rebuild is caught here too.
.PHONY: fastpath
fastpath: venv
	@$(PY) -P -c 'import dlcp.host._fastpath' > $(VENV)/fastpath.log 2>&1 || { \
	  echo "make test: the C fast path dlcp.host._fastpath does not import, and make test runs its tests:"; \
	  echo "  $$(tail -n 1 $(VENV)/fastpath.log)"; $(FASTPATH_HELP); exit 1; }

# DLCP_REQUIRE_FASTPATH=1: a test of the C path fails, rather than skips, without the module.
# The suite runs in PYTEST_WORKERS processes (pytest-xdist): much of its time is spent starting and waiting on
# processes (simulations, training ranks, switches in namespaces), which a second and third worker fill. The
# tests marked `timing` (wall or CPU time, rates, memory) form one xdist group: one worker runs them, one at a
# time; the tests marked `slow` start first (tests/conftest.py). Bytecode is cached (PYTHONDONTWRITEBYTECODE
# cleared, into the ignored build/ and __pycache__/): the suite starts hundreds of Python processes, and each
# would otherwise compile dlcp's modules again.
PYTEST_WORKERS ?= 3
pytest: venv venv-sim venv-p4rt-shell fastpath
	DLCP_REQUIRE_FASTPATH=1 PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder

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

# Compile the P4 programs into build/p4/ with whichever of p4c-bm2-ss, p4test and the
# Tofino compiler are installed (PATH, $DLCP_P4_BIN_DIR, $DLCP_TOFINO_P4C); see docs/switch.md.
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
# `dlcp switch shell ADDR` runs it; tests/p4rt/test_shell.py drives it against the software switch.
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

# make test-stress (not part of make test): the timing-sensitive tests beside a CPU load, then the
# switch started and stopped many times under the same load. The tests are tests/switch (the data-plane
# thread against real veths, the switch process, its rates and thresholds), tests/testbed (processes in
# namespaces, fabrics, jobs) and tests/p4rt (the P4Runtime server and its threads); the load is one busy
# loop per core at normal priority, started by tests/stress/cpu_load.py and killed by it, by pid, when the
# tests end. tests/stress/switch_cycles.py then runs STRESS_CYCLES start/stop cycles of
# `dlcp switch run --grpc` beside a P4Runtime server and client and the same load, and fails if any switch
# died; test-stress-p4rt (below) sends the switch's P4Runtime server bad input. Most of it needs root. On a
# shared machine run the parts one at a time: make test-stress-suite (about 10 minutes on 2 cores),
# make test-stress-cycles (1.7 s a cycle: about 30 minutes), make test-stress-p4rt (about 7 minutes).
STRESS_TESTS  ?= tests/switch tests/testbed tests/p4rt
STRESS_CYCLES ?= 1000

.PHONY: test-stress test-stress-suite test-stress-cycles test-stress-p4rt
test-stress: test-stress-suite test-stress-cycles test-stress-p4rt

test-stress-suite: venv fastpath
	DLCP_REQUIRE_FASTPATH=1 $(PY) tests/stress/cpu_load.py --max-seconds 1800 -- $(VENV)/bin/pytest -q $(STRESS_TESTS)

test-stress-cycles: venv
	cd tests/stress && ../../$(PY) switch_cycles.py --cycles $(STRESS_CYCLES) --max-seconds 3600

# make test-stress-p4rt: bad input to the software switch's P4Runtime server (tests/stress/p4rt_fuzz.py, root):
# STRESS_MALFORMED malformed requests and STRESS_CHURNS streams opened and dropped against a `dlcp switch run
# --grpc` process; fails if the switch crashed, a request went unanswered or got INTERNAL, the server stopped
# serving, or its resident memory grew by 20 MB or more.
STRESS_MALFORMED ?= 100000
STRESS_CHURNS    ?= 10000

test-stress-p4rt: venv
	$(PY) tests/stress/p4rt_fuzz.py --malformed $(STRESS_MALFORMED) --churns $(STRESS_CHURNS) --max-seconds 1800
