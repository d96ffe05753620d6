# samprof: one documented command per task. `make` (or `make help`) lists them.
#
# Every target that runs tests builds and installs the package into a virtual
# environment of its own, non-editable, so the tests import the installed
# copy (src/ is never on sys.path). The C core is compiled with warnings as
# errors everywhere (WERROR=0 to relax that locally).
#
# Knobs (override on the command line, e.g. `make test PYTHON=python3.12`):
#   PYTHON        interpreter for demo, build, test, test-sanitize, bench, lint
#   PY39 ... PY313  interpreters for test-all; by default the newest pyenv
#                 CPython 3.X.Y under $(PYENV_ROOT)/versions, else python3.X
#                 on PATH
#   PYTEST_ARGS   extra pytest arguments, e.g. PYTEST_ARGS='-k heap -x'
#   TEST_JOBS     tests run this many at a time (default 3: on a 2-CPU
#                 machine, at 2 the CPUs sat idle 18% of the time while tests
#                 waited on servers and children; the accuracy tests always
#                 run alone afterwards: tests/tools/suite.py)
#   WERROR        1 (default): compile the C core with -Werror
#   N             runs for flake-hunt (default 10) and spread (default 20)
#   SECONDS, SEED how long fuzz runs (default 300) and its random seed
#   SANITIZE      1: flake-hunt against the ASan+UBSan build

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# Builds share build/ and src/samprof.egg-info, and the accuracy tests
# measure CPU time: targets must not run side by side.
.NOTPARALLEL:

PYTHON ?= python3
PYENV_ROOT ?= $(HOME)/.pyenv
PYTHON_VERSIONS := 3.9 3.10 3.11 3.12 3.13
WERROR ?= 1
PYTEST_ARGS ?=
TEST_JOBS ?= 3
BENCH_ARGS ?=
# Lint tools are pinned: a new release that adds a rule must not break CI.
LINT_TOOLS ?= ruff==0.17.6
CLANG_FORMAT ?= clang-format
LINT_PATHS = $(wildcard src tests benchmarks demo)
C_SOURCES = $(wildcard src/samprof/_c/*.c src/samprof/_c/*.h)

# --no-compile: pip would byte-compile every installed module (Django's
# thousands) at install time, 11 s of the 32 s a test venv took to set up;
# Python compiles what the tests import, once, when they import it.
PIP_INSTALL = python -m pip install --no-compile --quiet --disable-pip-version-check --no-input
PYTEST = pytest -q -p no:cacheprovider $(PYTEST_ARGS)
# The whole suite, run by a virtual environment's python: the tests that do
# not measure accuracy TEST_JOBS at a time, then the accuracy tests alone.
SUITE = python tests/tools/suite.py $(TEST_JOBS) -q -p no:cacheprovider $(PYTEST_ARGS)
export SAMPROF_WERROR := $(WERROR)
# Bytecode is cached under build/pycache even where the environment sets
# PYTHONDONTWRITEBYTECODE: without it every test process and every child a
# test starts compiles Django, pytest and samprof from source again (a
# first pass with the cache warm used 13% less CPU on 3.12). The cache is keyed by each file's full path, so venvs
# and Pythons do not share entries.
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/build/pycache

# $(call find_python,3.X): the newest pyenv CPython 3.X.Y (free-threaded
# "3.X.Yt" builds excluded), else python3.X on PATH, else nothing.
find_python = $(shell \
    d=$$(ls -d $(PYENV_ROOT)/versions/$(1).* 2>/dev/null \
         | grep -E '/$(subst .,\.,$(1))\.[0-9]+$$' | sort -V | tail -n 1); \
    if [ -n "$$d" ] && [ -x "$$d/bin/python$(1)" ]; then \
        echo "$$d/bin/python$(1)"; \
    else \
        command -v python$(1) || true; \
    fi)
$(foreach v,$(PYTHON_VERSIONS),\
    $(eval PY$(subst .,,$(v)) ?= $(call find_python,$(v))))

# $(call make_venv,DIR,PYTHON): create the virtual environment DIR unless it
# exists (a half-made one is removed, so the next run starts over). pip is
# installed from the interpreter's own bundled wheel, run as pip itself, with
# --no-compile: venv's ensurepip byte-compiles all of pip first (6 s of the
# 7 s a venv took).
define make_venv
	@if [ ! -x $(1)/bin/pip ]; then \
	    py='$(2)'; \
	    if [ -z "$$py" ]; then \
	        echo "error: no interpreter for $(1); set PYTHON or PY3X" >&2; \
	        exit 1; \
	    fi; \
	    echo "--- creating $(1) with $$py ($$($$py -V 2>&1))"; \
	    rm -rf $(1); \
	    { $$py -m venv --without-pip $(1) \
	      && whl=$$(ls $$($(1)/bin/python -c \
	          'import ensurepip, os; print(os.path.dirname(ensurepip.__file__))')/_bundled/pip-*.whl) \
	      && $(1)/bin/python "$$whl/pip" install --no-compile --quiet \
	          --disable-pip-version-check --no-index "$$whl"; \
	    } || { rm -rf $(1); exit 1; }; \
	fi
endef

# $(call install_package,DIR,EXTRA[,ENV]): non-editable install of the
# package (plus the optional dependencies EXTRA) into the virtual environment
# DIR, building with the environment assignments ENV; then checks that DIR's
# copy is the one `import samprof` finds from here.
define install_package
	@echo "--- installing samprof$(if $(2),[$(2)]) into $(1)"
	$(3) $(1)/bin/$(PIP_INSTALL) '.$(if $(2),[$(2)])'
	@origin=$$($(1)/bin/python -c \
	    'import importlib.util as u; print(u.find_spec("samprof").origin)'); \
	case "$$origin" in \
	    "$(CURDIR)/$(1)/"*) ;; \
	    *) echo "error: import samprof finds $$origin, not $(1)" >&2; \
	       exit 1 ;; \
	esac
endef

# $(call extension,DIR): path of the compiled core installed in DIR.
extension = $$(ls $(1)/lib/python3*/site-packages/samprof/_samprof*.so)

# The statistical accuracy tests (marker `accuracy`, tests/support/measure.py)
# run at half length on every Python (a miss is measured again, at full and
# twice the full length, before it fails: a real error fails all three);
# `make test` runs them at full length. The tests of Python-level code (marker
# `bounds`, tests/support/scope.py) run on the oldest and the newest Python
# only.
SCOPE_ALL := $(firstword $(PYTHON_VERSIONS)) $(lastword $(PYTHON_VERSIONS))

# $(call run_tests,DIR,PYTHON[,ACCURACY[,SCOPE]]): install into DIR (made
# with PYTHON) and run the suite there against an ordinary build; ACCURACY
# is full (default) or short, SCOPE all (default) or core.
define run_tests
	$(call make_venv,$(1),$(2))
	$(call install_package,$(1),test)
	@if ldd $(call extension,$(1)) | grep -q libasan; then \
	    echo "error: $(1) holds a sanitizer build" >&2; exit 1; \
	fi
	@echo "--- pytest on $$($(1)/bin/python -V 2>&1), accuracy tests $(or $(3),full), scope $(or $(4),all)"
	SAMPROF_ACCURACY=$(or $(3),full) SAMPROF_SCOPE=$(or $(4),all) $(1)/bin/$(SUITE)
endef

.PHONY: help
help: ## List the targets.
	@echo 'samprof make targets:'
	@grep -E '^[a-z][a-z0-9.-]*:.*## ' $(MAKEFILE_LIST) \
	    | sed -E 's/^([^:]*):.*## (.*)/\1|\2/' \
	    | awk -F'|' '{ printf "  %-15s %s\n", $$1, $$2 }'
	@echo '  test-3.X        tests on one Python of $(PYTHON_VERSIONS)'
	@echo 'Interpreters for test-all:'
	@$(foreach v,$(PYTHON_VERSIONS),\
	    echo '  $(v): $(or $(PY$(subst .,,$(v))),not found)';)

.PHONY: demo
demo: ## Profile demo/demo.py and print its top functions (venv .venv).
	$(call make_venv,.venv,$(PYTHON))
	$(call install_package,.venv,)
	.venv/bin/samprof record -o demo.pb.gz -- demo/demo.py
	.venv/bin/samprof top demo.pb.gz

.PHONY: build
build: ## Build the C core in place (src/samprof), warnings as errors.
	$(call make_venv,.venv,$(PYTHON))
	.venv/bin/$(PIP_INSTALL) --upgrade setuptools
	.venv/bin/python setup.py --quiet build_ext --inplace

.PHONY: test
test: ## Run the tests on the default python3 (PYTHON; venv .venv).
	$(call run_tests,.venv,$(PYTHON))

.PHONY: test-all
test-all: $(addprefix test-,$(PYTHON_VERSIONS)) ## Run the tests on every supported Python (3.9-3.13).

define python_version_rule
.PHONY: test-$(1)
test-$(1):
	$$(call run_tests,.venv-$(1),$$(PY$(subst .,,$(1))),short,$(if $(filter $(1),$(SCOPE_ALL)),all,core))
endef
$(foreach v,$(PYTHON_VERSIONS),$(eval $(call python_version_rule,$(v))))

# A stock (uninstrumented) python loading an ASan-instrumented module needs
# the ASan runtime first in the library list, hence LD_PRELOAD. The UBSan
# runtime needs no preload: the module's own DT_NEEDED entry loads it. The
# preloaded library is the one the module was linked against (ldd), so the
# runtime always matches the compiler that built it. PYTHONMALLOC=malloc lets
# ASan see every Python allocation; Python's own leaks at exit are not ours
# (detect_leaks=0). The build aborts on the first UB report
# (-fno-sanitize-recover), so a report fails the test run.
# SAMPROF_SANITIZED=1 tells tests that depend on timing (accuracy, overhead)
# that they run instrumented.
# $(call sanitizer_env,DIR): checks DIR's module is linked against libasan
# and prints the environment assignments to run it with.
define sanitizer_env
$$(ext=$(call extension,$(1)); \
   asan=$$(ldd "$$ext" | awk '/libasan/ { print $$3 }'); \
   if [ ! -f "$$asan" ]; then \
       echo "error: $$ext is not linked against libasan" >&2; exit 1; \
   fi; \
   echo "LD_PRELOAD=$$asan PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0" \
        "UBSAN_OPTIONS=print_stacktrace=1 SAMPROF_SANITIZED=1")
endef

.PHONY: test-sanitize
test-sanitize: ## Run the tests against an ASan+UBSan build (venv .venv-asan).
	$(call make_venv,.venv-asan,$(PYTHON))
	$(call install_package,.venv-asan,test,SAMPROF_SANITIZE=1)
	@env=$(call sanitizer_env,.venv-asan); \
	echo "--- pytest on $$(.venv-asan/bin/python -V 2>&1), $$env SAMPROF_SCOPE=core"; \
	set -x; \
	env $$env SAMPROF_SCOPE=core .venv-asan/bin/$(SUITE)

# Where flake-hunt and spread install: one venv per interpreter and flavour.
HUNT_NAME = $(notdir $(PYTHON))$(if $(filter 1,$(SANITIZE)),-asan)
HUNT_VENV = .venv-hunt-$(HUNT_NAME)

.PHONY: flake-hunt
flake-hunt: ## Run the suite N times (N=10; PYTHON, SANITIZE=1, PYTEST_ARGS): failures per test.
	$(call make_venv,$(HUNT_VENV),$(PYTHON))
	$(call install_package,$(HUNT_VENV),test,$(if $(filter 1,$(SANITIZE)),SAMPROF_SANITIZE=1))
	@env=$(if $(filter 1,$(SANITIZE)),$(call sanitizer_env,$(HUNT_VENV)),SAMPROF_ACCURACY=full); \
	echo "--- flake hunt: $(or $(N),10) runs on $$($(HUNT_VENV)/bin/python -V 2>&1), $$env"; \
	env $$env $(HUNT_VENV)/bin/python tests/tools/flake_hunt.py $(or $(N),10) \
	    build/flake-hunt/$(HUNT_NAME) -- $(HUNT_VENV)/bin/$(SUITE)

.PHONY: spread
spread: ## Run the accuracy tests N times (N=20; PYTHON) without retries: each error's min/median/max.
	$(call make_venv,$(HUNT_VENV),$(PYTHON))
	$(call install_package,$(HUNT_VENV),test)
	@mkdir -p build/spread; log=$(CURDIR)/build/spread/$(HUNT_NAME).jsonl; rm -f "$$log"; \
	SAMPROF_RETRIES=0 SAMPROF_SPREAD_LOG="$$log" $(HUNT_VENV)/bin/python \
	    tests/tools/flake_hunt.py $(or $(N),20) build/spread/$(HUNT_NAME) -- \
	    $(HUNT_VENV)/bin/$(PYTEST) -m accuracy || true; \
	$(HUNT_VENV)/bin/python tests/tools/spread.py "$$log" | tee build/spread/$(HUNT_NAME).txt

.PHONY: fuzz
fuzz: ## Fuzz the pprof reader for SECONDS (default 300; PYTHON, SEED): prints what it found.
	$(call make_venv,$(HUNT_VENV),$(PYTHON))
	$(call install_package,$(HUNT_VENV),test)
	$(HUNT_VENV)/bin/python tests/scripts/fuzz_pprof.py $(or $(SECONDS),300) $(or $(SEED),1) \
	    | $(HUNT_VENV)/bin/python -c 'import json, sys; r = json.load(sys.stdin); \
	        print(r["cases"], "cases", r["by_mutation"]); \
	        [print(f["mutation"], f["error"], f["traceback"], f["input"], sep="\n") for f in r["failures"]]; \
	        sys.exit(1 if r["failures"] else 0)'

.PHONY: bench
bench: ## Run the benchmarks and rewrite docs/benchmarks.md (python -m benchmarks; venv .venv-bench).
	$(PYTHON) -m benchmarks --out docs/benchmarks.md --plot docs/benchmarks-overhead.png $(BENCH_ARGS)

.PHONY: bench-smoke
# One cell of each kind the harness measures (a core workload with its noise
# control, heap, idle threads, cost per sample, web middleware, memory) and
# the report and plot drawn from them: 20 s of runs, where every cell of
# --quick took a minute.
SMOKE_WORKLOADS = call-heavy,alloc-heavy,idle-100,depth-50,web-flask,soak
SMOKE_PROFILERS = none,samprof-cpu-100,samprof-wall-100,samprof-heap-512k,samprof-cpu-10k-perf
bench-smoke: ## One short benchmark run of one cell of each kind, so the harness keeps working.
	$(PYTHON) -m benchmarks --quick --workloads $(SMOKE_WORKLOADS) --profilers $(SMOKE_PROFILERS) \
	    --out build/bench-smoke/benchmarks.md --plot build/bench-smoke/overhead.png

.PHONY: lint
lint: ## ruff check + ruff format --check; clang-format on the C if installed.
	$(call make_venv,.venv-lint,$(PYTHON))
	.venv-lint/bin/$(PIP_INSTALL) $(LINT_TOOLS)
	.venv-lint/bin/ruff check $(LINT_PATHS)
	.venv-lint/bin/ruff format --check $(LINT_PATHS)
	@if command -v $(CLANG_FORMAT) >/dev/null 2>&1; then \
	    echo "$(CLANG_FORMAT) --dry-run -Werror src/samprof/_c/*.[ch]"; \
	    $(CLANG_FORMAT) --dry-run -Werror $(C_SOURCES); \
	else \
	    echo "note: $(CLANG_FORMAT) not installed; C layout not checked"; \
	fi

.PHONY: format
format: ## Rewrite Python (ruff format) and C (clang-format) in place.
	$(call make_venv,.venv-lint,$(PYTHON))
	.venv-lint/bin/$(PIP_INSTALL) $(LINT_TOOLS)
	.venv-lint/bin/ruff format $(LINT_PATHS)
	@if command -v $(CLANG_FORMAT) >/dev/null 2>&1; then \
	    echo "$(CLANG_FORMAT) -i src/samprof/_c/*.[ch]"; \
	    $(CLANG_FORMAT) -i $(C_SOURCES); \
	else \
	    echo "note: $(CLANG_FORMAT) not installed; C left as it is"; \
	fi

# Komodo's IDE-side DBGP library (Python 2 code) drives the debugger's
# engine in tests/debug/test_komodo.py.
PY27 ?= $(call find_python,2.7)
KOMODO_DIR = build/komodo-pydbgp
KOMODO_VERSION = 10.2.2.89895

.PHONY: deps
deps: ## Install missing system tools (Go for `go tool pprof`, valgrind, clang-format, Chromium for the flame page tests, openssl for the TLS tests) with apt, and Komodo's DBGP library for Python 2.7.
	@missing=; \
	command -v go >/dev/null 2>&1 || missing="$$missing golang-go"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	command -v valgrind >/dev/null 2>&1 || missing="$$missing valgrind"; \
	command -v openssl >/dev/null 2>&1 || missing="$$missing openssl"; \
	command -v $(CLANG_FORMAT) >/dev/null 2>&1 \
	    || missing="$$missing clang-format"; \
	$(PYTHON) -c 'import ensurepip' 2>/dev/null \
	    || missing="$$missing python3-venv"; \
	$(PYTHON) -c 'import os, sysconfig; \
	    inc = sysconfig.get_paths()["include"]; \
	    assert os.path.exists(os.path.join(inc, "Python.h"))' 2>/dev/null \
	    || missing="$$missing python3-dev"; \
	if [ -z "$$missing" ]; then \
	    echo "deps: nothing to install ($$(go version))"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "deps: apt-get install$$missing"; \
	    apt-get update -qq; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing \
	        >/dev/null; \
	    go version; \
	else \
	    echo "deps: missing$$missing; install them (tests that read" \
	         "profiles with go tool pprof fail without Go, the flame page" \
	         "tests without Chromium)" >&2; \
	fi
	@if [ -z "$(PY27)" ]; then \
	    echo "deps: no Python 2.7 (pyenv install 2.7.18): the DBGP test driven by" \
	         "Komodo's IDE library fails without it" >&2; \
	elif [ ! -d $(KOMODO_DIR)/dbgp ]; then \
	    echo "deps: komodo-pydbgp for $(PY27) into $(KOMODO_DIR)"; \
	    $(PY27) -m pip install --quiet --disable-pip-version-check --no-input \
	        --target $(KOMODO_DIR) komodo-pydbgp==$(KOMODO_VERSION); \
	fi

# THE test command (README, .ci/run): every stage CI runs, in order
# (test-all spelled out, so .ci/run times each Python).
CHECK_STAGES := deps lint $(addprefix test-,$(PYTHON_VERSIONS)) test-sanitize bench-smoke
.PHONY: check
check: $(CHECK_STAGES) ## Everything CI runs: deps, lint, test-all, test-sanitize, bench-smoke.

.PHONY: print-check-stages
print-check-stages:
	@echo $(CHECK_STAGES)

.PHONY: clean
clean: ## Remove virtual environments, build outputs and demo.pb.gz.
	rm -rf .venv .venv-* build dist src/samprof.egg-info demo.pb.gz
	rm -f src/samprof/_samprof*.so
