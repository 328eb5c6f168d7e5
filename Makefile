# One entry point for people and CI. Every target bootstraps what it needs.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PY      ?= python3
# jsii (the CDK's runtime) warns on every start under Node 20; the warning is noise here.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# The gateway's runtime, exact and hashed: the one list the image installs too (its
# Dockerfile) and the venv installs first; every other requirements file is installed
# under its pins as constraints, so the tests run on exactly what ships. `make lock`
# regenerates it from gateway_src/pyproject.toml's ranges.
LOCK    := gateway_src/requirements.lock
# the lock's entries installed again after it (two wheels own the same files:
# tools/lock_last.py says which and why)
LAST_LOCK := gateway_src/requirements-last.lock
LOCK_PINS := $(VENV)/lock-pins.txt
REQS    := $(filter-out requirements/lock-tools.txt,$(wildcard requirements/*.txt))
# The gateway alone (what `make demo` needs): a quicker first bootstrap than the IaC tools.
CORE_STAMP := $(VENV)/.installed-core
CORE_REQS  := requirements/dev.txt
PIP     := $(BIN)/pip --disable-pip-version-check -q
# The lock's pins without their hashes: a constraints file (pip refuses hashes there).
define install_lock
	@$(PIP) install --require-hashes --no-deps -r $(LOCK) 2>&1 | $(QUIET)
	@$(PIP) install --require-hashes --no-deps --force-reinstall -r $(LAST_LOCK) 2>&1 | $(QUIET)
	@sed -nE 's/^([A-Za-z0-9][^ ]*==[^ ]*).*/\1/p' $(LOCK) > $(LOCK_PINS)
endef
# The machine's pip config names a local index that may be absent; drop that noise only.
QUIET   := { grep -v '^WARNING: Location' || true; }

.PHONY: venv venv-core native system-deps image-env lock demo test lint bench synth cdk-cli preflight checkov clean
.PHONY: validate

# Debian packages the tests run for real (command:package): the shared store, the HTML
# reports' renderer, the metrics linter, the CDK CLI's runtime, Kustomize for the region
# overlays, iproute2 for the pod tests' network namespaces (tests/pods). `make test`
# installs the missing ones with apt-get when run as root, and otherwise stops and names
# them; a test never skips for want of one.
SYSTEM_TOOLS := redis-server:redis-server chromium:chromium promtool:prometheus \
                node:nodejs npm:npm kubectl:kubectl ip:iproute2
system-deps:
	@missing=""; for pair in $(SYSTEM_TOOLS); do \
	  command -v "$${pair%%:*}" >/dev/null || missing="$$missing $${pair##*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "==> installing Debian packages:$$missing (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else \
	    echo "make: these Debian packages are missing:$$missing" >&2; \
	    echo "      install them (sudo apt-get install$$missing) and run make again" >&2; \
	    exit 1; \
	  fi; \
	fi

venv: $(STAMP)
venv-core: $(CORE_STAMP)

# mypyc builds of the simulator's hot modules (inference_gateway/native.py), rebuilt when
# their sources change; without gcc the same modules run as plain Python (NATIVE=required
# makes a failed build an error, as CI does).
NATIVE_SRCS  := $(addprefix gateway_src/inference_gateway/,emulator/engine.py emulator/kvcache.py \
                sim/driver.py sim/metrics.py sim/workload.py native.py)
NATIVE_STAMP := $(VENV)/.native
NATIVE       ?= optional
native: $(NATIVE_STAMP)
$(NATIVE_STAMP): $(STAMP) $(NATIVE_SRCS)
	@echo "==> compiling the simulator's hot modules with mypyc (about a minute)"
	@$(BIN)/python -c "from inference_gateway import native; native.build()" >$(VENV)/native-build.log 2>&1 \
	  || { echo "    mypyc build failed (see $(VENV)/native-build.log); the simulator runs as plain Python"; \
	       test "$(NATIVE)" != required; }
	@touch $(NATIVE_STAMP)

$(CORE_STAMP): $(LOCK) $(LAST_LOCK) $(CORE_REQS) gateway_src/pyproject.toml
	@echo "==> bootstrapping $(VENV) with the gateway's locked requirements"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(install_lock)
	@$(PIP) install -c $(LOCK_PINS) $(foreach r,$(CORE_REQS),-r $(r)) 2>&1 | $(QUIET)
	@$(PIP) install --no-deps -e gateway_src 2>&1 | $(QUIET)
	@touch $(CORE_STAMP)

$(STAMP): $(LOCK) $(LAST_LOCK) $(REQS) pyproject.toml gateway_src/pyproject.toml
	@echo "==> bootstrapping $(VENV) from pinned requirements (first run takes a few minutes)"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(install_lock)
	@$(PIP) install -c $(LOCK_PINS) $(foreach r,$(REQS),-r $(r)) 2>&1 | $(QUIET)
	@$(PIP) install --no-deps -e gateway_src -e . 2>&1 | $(QUIET)
	@$(BIN)/python -c "import inference_gateway, stacks, charts"
	@touch $(STAMP) $(CORE_STAMP)

demo: venv-core
	$(BIN)/igw demo --dataplane both

# The tests need the compiled simulator modules (test_native.py checks them), so a failed
# build is an error here.
test: NATIVE := required
# Two pytest-xdist workers (tests/conftest.py says why and how tests are grouped);
# TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= 2
test: system-deps venv native cdk-cli image-env
	$(BIN)/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

# The gateway image's Python environment, built on this machine from gateway_src/Dockerfile's
# own steps (tools/image_env.py replays them; no Docker engine needed): .image/usr-local is
# what the image has at /usr/local. The pod tests start the rendered containers from it.
IMAGE_ENV   := .image
IMAGE_STAMP := $(IMAGE_ENV)/.built
image-env: $(IMAGE_STAMP)
$(IMAGE_STAMP): $(STAMP) tools/image_env.py gateway_src/Dockerfile $(LOCK) $(LAST_LOCK) gateway_src/pyproject.toml \
                $(shell find gateway_src/inference_gateway -name '*.py' -o -name '*.yaml' -o -name '*.j2')
	@$(BIN)/python tools/image_env.py --dockerfile gateway_src/Dockerfile --python $(BIN)/python --out $(IMAGE_ENV)
	@touch $(IMAGE_STAMP)

# Regenerate the lock from gateway_src/pyproject.toml (pip-tools in a venv of its own; keeps
# the locked versions unless a range no longer admits them: `make lock UPGRADE=1` moves them).
LOCK_TOOLS := $(VENV)-lock
lock:
	@test -x $(LOCK_TOOLS)/bin/pip-compile || { $(PY) -m venv $(LOCK_TOOLS) && \
	  $(LOCK_TOOLS)/bin/pip install -q -r requirements/lock-tools.txt 2>&1 | $(QUIET); }
	cd gateway_src && ../$(LOCK_TOOLS)/bin/pip-compile --quiet --generate-hashes --allow-unsafe \
	  --strip-extras --no-emit-index-url --no-emit-find-links $(if $(UPGRADE),--upgrade) \
	  --output-file requirements.lock pyproject.toml
	$(BIN)/python tools/lock_last.py $(LOCK)

# mypy --strict twice: the gateway package from its own folder, the infrastructure code
# (stacks/, cdk8s/charts as `charts`, envspec/) from here (pyproject.toml [tool.mypy]).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	cd gateway_src && ../$(BIN)/mypy --strict inference_gateway
	$(BIN)/mypy --strict -p stacks -p charts -p envspec

bench: system-deps venv native
	$(BIN)/python bench/run.py

# Every environment: CDK templates into cdk.out/<env>/ (no AWS credentials needed), and
# the Kubernetes side into gitops/environments/<env>/rendered/.
ENVS ?= $(notdir $(wildcard gitops/environments/*))
synth: venv
	@for env in $(ENVS); do \
	  echo "==> cdk synth $$env"; \
	  JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 CDK_OUTDIR=cdk.out/$$env \
	    IGW_ENVIRONMENT=$$env $(BIN)/python app.py || exit 1; \
	done
	@echo "==> cdk8s synth"
	@$(BIN)/python cdk8s/main.py

# The AWS CDK CLI for `cdk synth` / `cdk deploy`, at the version package.json and
# package-lock.json pin, into ./node_modules (nothing global): then `npx cdk synth -c
# environment=dev`. cdk.json runs the app with .venv/bin/python, so `make venv` first.
CDK_CLI := node_modules/.bin/cdk
cdk-cli: $(CDK_CLI)
$(CDK_CLI): package.json package-lock.json
	@echo "==> installing the pinned AWS CDK CLI into node_modules/"
	@npm ci --no-audit --no-fund --loglevel=error
	@touch $(CDK_CLI)

# Preflight of one environment (AWS credentials from the boto3 chain; read-only): instance
# offerings per zone and vCPU quotas, and the prerequisites a deploy cannot create (ACM
# certificates, Secrets Manager secrets). ARGS=--allow-unread-quotas, --json PATH, …
ENV ?= dev
preflight: venv
	$(BIN)/python -m stacks.preflight $(ENV) $(ARGS)

# `igw validate` over every config the repository ships: environments, their rendered
# trees, the examples (a PR check; .pre-commit-hooks.yaml runs it on the changed files).
VALIDATED = gitops/environments/*/environment.yaml gitops/environments/*/rendered \
            $(wildcard gitops/environments/*/global/*) $(shell find examples -name '*.yaml')
validate: venv
	$(BIN)/igw validate $(VALIDATED)

# checkov lives in its own venv (its pins clash with pytest's); created on first use.
checkov: venv
	cdk8s/checkov.sh -d gitops --framework kubernetes

clean:
	rm -rf $(VENV) $(VENV)-lock $(IMAGE_ENV) cdk8s/.tools-venv .pytest_cache .ruff_cache cdk.out node_modules
	find gateway_src -name '*.so' -delete
	rm -f gateway_src/inference_gateway/_native_manifest.json
