# grpo-ui — `make run` starts the app, `make test` runs the whole suite. Both install what they need.
PYTHON ?= python3
VENV := .venv
PORT ?= 8501
SWIFT_VENV ?= $(HOME)/.cache/grpo-ui/swift-venv
SWIFT3_VENV ?= $(HOME)/.cache/grpo-ui/swift3-venv
MEGATRON_VENV ?= $(HOME)/.cache/grpo-ui/megatron-venv
ASSETS ?= $(HOME)/.cache/grpo-ui/tiny-assets
APT_PACKAGES := openssh-server chromium shellcheck pdsh iproute2 curl procps slurmctld slurmd slurm-client munge

.PHONY: run test deps test-deps system-deps swift-venv swift3-venv megatron-venv assets lint bench screenshots lock

# Every venv is installed from a lock file: each package at an exact version, its file checked against the hashes
# there (--require-hashes). The requirements*.txt files hold the ranges the locks are resolved from (and what a
# project embedding grpo_ui asks for); `make lock` resolves them again to the newest releases inside the ranges.
INSTALL = pip install -q --require-hashes
PIP_TOOLS := pip-tools==7.6.2
SWIFT3 := ms-swift==3.12.6
COMPILE = CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet --upgrade --generate-hashes --allow-unsafe --strip-extras \
	--no-emit-index-url --no-emit-find-links

$(VENV)/.deps: requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/$(INSTALL) -r requirements.lock
	touch $@

deps: $(VENV)/.deps

run: deps
	$(VENV)/bin/streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT) \
		--server.headless true --browser.gatherUsageStats false

$(VENV)/.test-deps: $(VENV)/.deps requirements-test.lock
	$(VENV)/bin/$(INSTALL) -r requirements-test.lock
	touch $@

test-deps: $(VENV)/.test-deps

# The test lock is resolved within the app lock's versions: both go into .venv. ms-swift 3.x goes into its venv
# without its dependencies (requirements-swift3.txt says why), so its one file is hashed on its own.
lock: deps
	$(VENV)/bin/pip install -q $(PIP_TOOLS)
	$(COMPILE) -o requirements.lock requirements.txt
	$(COMPILE) -c requirements.lock -o requirements-test.lock requirements-test.txt
	$(COMPILE) -o requirements-swift.lock requirements-swift.txt
	$(COMPILE) -o requirements-swift3.lock requirements-swift3.txt
	$(COMPILE) -c requirements-swift.lock -o requirements-megatron.lock requirements-megatron.txt
	rm -rf build/lock && $(VENV)/bin/pip download -q --no-deps -d build/lock $(SWIFT3)
	{ echo "# $(SWIFT3) alone, installed with --no-deps (make lock: pip download, pip hash)"; \
	  echo "$(SWIFT3) $$($(VENV)/bin/pip hash build/lock/* | tail -1)"; } > requirements-swift3-nodeps.lock

# Debian packages the tests use: sshd for the test hosts, chromium for the browser tests, shellcheck, pdsh, and
# Slurm (slurmctld, slurmd, munge) for the Slurm backend's tests.
system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# ms-swift 4.6 on the CPU torch, in a venv cached between runs on the same machine.
$(SWIFT_VENV)/.ok: requirements-swift.lock
	$(PYTHON) -m venv $(SWIFT_VENV)
	$(SWIFT_VENV)/bin/$(INSTALL) -r requirements-swift.lock
	touch $@

swift-venv: $(SWIFT_VENV)/.ok

# ms-swift 3.12.6's argument classes only (the import corpus parses 3.x command lines with them): ~1.6 GB, ~1 min.
$(SWIFT3_VENV)/.ok: requirements-swift3.lock requirements-swift3-nodeps.lock
	$(PYTHON) -m venv $(SWIFT3_VENV)
	$(SWIFT3_VENV)/bin/$(INSTALL) -r requirements-swift3.lock
	$(SWIFT3_VENV)/bin/$(INSTALL) --no-deps -r requirements-swift3-nodeps.lock
	touch $@

swift3-venv: $(SWIFT3_VENV)/.ok

# ms-swift 4.6 with megatron-core and mcore-bridge: megatron rlhf's own argument classes, the Megatron oracle
# (tests/megatron_oracle.py; Transformer Engine and Triton are stood in for by tests/megatron_standins/).
$(MEGATRON_VENV)/.ok: requirements-megatron.lock
	$(PYTHON) -m venv $(MEGATRON_VENV)
	$(MEGATRON_VENV)/bin/$(INSTALL) -r requirements-megatron.lock
	touch $@

megatron-venv: $(MEGATRON_VENV)/.ok

# The tiny local model, tokenizer and dataset the real ms-swift tests train on.
assets: swift-venv
	$(SWIFT_VENV)/bin/python tests/tiny_job.py build $(ASSETS)

# Two pytest-xdist workers (CI has two cores; many tests wait on subprocesses, hosts and browsers); tests sharing the
# system's Slurm or a real Ray cluster keep to one worker (tests/conftest.py).
test: system-deps test-deps swift-venv swift3-venv megatron-venv assets
	GRPO_UI_SWIFT_VENV=$(SWIFT_VENV) GRPO_UI_SWIFT3_VENV=$(SWIFT3_VENV) GRPO_UI_MEGATRON_VENV=$(MEGATRON_VENV) \
		GRPO_UI_ASSETS=$(ASSETS) $(VENV)/bin/pytest -n 2 --dist loadgroup

# The README's screenshots: the browser tests take them into build/screenshots/ (make test runs them); this copies
# the latest ones into docs/screenshots/.
screenshots:
	@ls build/screenshots/*.png > /dev/null 2>&1 || { echo "no screenshots yet: run make test (or pytest tests/test_browser*.py)"; exit 1; }
	mkdir -p docs/screenshots && cp build/screenshots/*.png docs/screenshots/

lint: test-deps
	$(VENV)/bin/ruff check .

# Every bench/*.py prints its figures, except the modules the accuracy benches import: calibration.py (the memory
# rows), time_calibration.py (the time rows, and `--fit` to refit the constants: a tool, not a benchmark) and
# megatron_calibration.py (the Megatron rows, printed by memory_accuracy.py and time_accuracy.py).
BENCHES := $(filter-out bench/calibration.py bench/time_calibration.py bench/megatron_calibration.py,$(wildcard bench/*.py))

bench: system-deps test-deps swift-venv swift3-venv
	for b in $(BENCHES); do echo "== $$b"; PYTHONPATH=. $(VENV)/bin/python $$b || exit 1; done
