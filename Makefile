# Two entry points for a fresh clone: `make demo` and `make test`. Both install into .venv.
# torch is pinned through constraints.txt: 2.13.0 is the CPU build on the machine, any other
# request pulls gigabytes of CUDA packages.

VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
PYTHON  ?= python3

.PHONY: install demo test check lint bench clean browser

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install  # ends with `stoker demo`, about a minute of real training
	@echo "== stoker allocate: the paper's static case (Sec. II-D) under every policy =="
	$(BIN)/stoker allocate configs/requests/paper-static.json --compare
	@echo
	@echo "== the same request, machine-readable, with the exact optimum =="
	$(BIN)/stoker allocate configs/requests/paper-static.json --policy optimal
	@echo
	@echo "== the paper's dynamic workload (Table III) on the simulated node, static vs the default policy =="
	$(BIN)/stoker simulate configs/workloads/paper-dynamic.toml --policy static
	@echo
	$(BIN)/stoker simulate configs/workloads/paper-dynamic.toml --timeline paper-dynamic.png
	@echo
	@echo "== the live daemon: real PyTorch jobs on this machine, resized as they arrive and finish =="
	$(BIN)/stoker demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy examples  # scripts, not a package: checked on their own
	$(BIN)/lint-imports  # DESIGN.md's import rules, as the contracts in pyproject.toml
	$(BIN)/pytest -q -p no:cacheprovider -n 0 tests/unit/test_house_rules.py tests/unit/test_import_rules.py  # sizes, circles, typed seams (issue 38)

# Debian's Chromium for the dashboard's browser tests (Playwright drives it). Best effort:
# without root or apt those tests skip and say why.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    { timeout 900 apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || \
	      { timeout 300 apt-get update -qq >/dev/null 2>&1 && \
	        timeout 900 apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }; }; } || \
	  echo "note: no Chromium here; the dashboard's browser tests will be skipped"

test: lint browser  # on every core, then the tests that time the host alone (pytest -m serial)
	$(BIN)/pytest -m "not serial"
	$(BIN)/pytest -m serial -n 0 $$(grep -rl "pytest.mark.serial" tests --include="*.py")  # collects only the files that have one: 2.6 s less

check: lint  # the loop while you work: lint and the unit tests (no daemon, no job process); CI runs `make test`
	$(BIN)/pytest -m "not serial" tests/unit

bench: install
	$(BIN)/python -m bench.bench_allocator
	$(BIN)/python -m bench.bench_tpm_fit
	$(BIN)/python -m bench.bench_paper
	$(BIN)/python -m bench.bench_simulate
	$(BIN)/python -m bench.bench_curves
	$(BIN)/python -m bench.bench_daemon
	$(BIN)/python -m bench.bench_footprint
	$(BIN)/python -m bench.bench_planning

clean:
	rm -rf $(VENV) bench/out .mypy_cache .ruff_cache .pytest_cache .hypothesis .import_linter_cache
