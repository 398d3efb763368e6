# perfci: `make bench` (the main job) and `make test` are the whole set-up on a fresh machine.
# Each target creates/reuses .venv (it sees the system site-packages, so a GPU runner's own CUDA
# torch/triton are used, never downloaded) and installs what is missing first.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
STAMP  := $(VENV)/.perfci-installed
# torch==2.13.0 is the CPU wheel on our CI/dev machines; a GPU runner brings its own CUDA torch.
TORCH_PIN ?= torch==2.13.0
REPORT_DIR ?= reports/latest
BENCH_ARGS ?=

.PHONY: install bench bench-timing bench-detect bench-matmul bench-flash bench-all report test lint clean

$(PY):
	$(PYTHON) -m venv --system-site-packages $(VENV)

# When $(PYTHON) is itself a virtual environment (as on GPU images that ship torch in one),
# --system-site-packages sees the base interpreter only: a .pth file adds the parent's packages.
$(STAMP): pyproject.toml Makefile | $(PY)
	@$(PYTHON) -c "import site, sys; print('\n'.join(site.getsitepackages()) if sys.prefix != sys.base_prefix else '')" \
		> "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/_perfci_parent_site.pth"
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q --no-build-isolation -e ".[test]" || { echo "make: pip could not resolve the \
	dependencies (offline?); installing perfci alone, using what is importable"; \
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .; }
	@$(PY) -m ruff --version >/dev/null 2>&1 || $(PY) -m pip install -q ruff \
		|| echo "make: ruff could not be installed here; lint will be skipped"
	@touch $@

install: $(STAMP)

## the main job: run the suite, compare with this GPU's baselines, write the report
bench: install
	$(BIN)/perfci run --report-dir $(REPORT_DIR) $(BENCH_ARGS)

## timer precision: 10 fresh processes, perfci vs do_bench / do_bench_cudagraph / torch Timer
bench-timing: install
	$(PY) scripts/bench_timing.py $(BENCH_ARGS)

## regression detection: A/A runs and planted slowdowns vs pytest-benchmark's median:5%
bench-detect: install
	$(PY) scripts/bench_detect.py $(BENCH_ARGS)

bench-matmul: install
	$(BIN)/perfci run --no-compare --report-dir reports/matmul tests/perf/test_matmul.py $(BENCH_ARGS)

bench-flash: install
	$(BIN)/perfci run --no-compare --report-dir reports/flash tests/perf/test_flash.py tests/perf/test_decode.py $(BENCH_ARGS)

bench-all: install
	$(BIN)/perfci run --report-dir reports/all tests/perf $(BENCH_ARGS)

## the report of the newest run against this GPU's baseline, with every stored run as history
report: install
	@newest=$$(ls -t .perfci/results/*_run.json 2>/dev/null | head -1); \
	if [ -z "$$newest" ]; then echo "make report: no run yet (make bench first)" >&2; exit 2; fi; \
	base=$$($(BIN)/perfci env --json | $(PY) -c 'import json,sys; d=json.load(sys.stdin); print(d["baseline_file"] if d["baseline_exists"] else "")'); \
	$(BIN)/perfci report $$base $$newest --history .perfci/results -o $(REPORT_DIR)

lint: install
	@if $(PY) -m ruff --version >/dev/null 2>&1; then $(PY) -m ruff check perfci kernels tests scripts; \
	else echo "lint skipped: ruff is not installed here"; fi

## unit + pytester tests (CPU), kernel tests in the Triton interpreter, gpu tests when a GPU is present
test: lint
	@$(PY) -m pytest tests -q -p no:cacheprovider; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

clean:
	rm -rf .perfci reports .benchmarks
