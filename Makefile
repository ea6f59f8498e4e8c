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
	MYPYPATH=$$(ls -d build/__editable__*) $(VENV)/bin/mypy -p dlcp

pytest: venv
	$(VENV)/bin/pytest -q

test: lint typecheck pytest

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache

