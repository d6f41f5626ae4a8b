# Bootstraps its own virtual environment; every target is idempotent.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.layerscope-installed

.PHONY: demo test test-quick test-slow test-stress test-gpu docs dist venv clean

venv: $(STAMP)

# version.py too: the installed metadata carries the version, so a bump reinstalls.
$(STAMP): pyproject.toml layerscope/core/version.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@# The torch/torchvision pair cached on these machines; elsewhere pip resolves the ranges.
	@$(PY) -c "import torch, torchvision" 2>/dev/null || \
		$(PY) -m pip install -q "torch==2.14.1" "torchvision==0.29.1" || true
	@$(PY) -m pip install -q -e ".[test,onnx]"
	@touch $(STAMP)

# Trains digits-cnn (one thread: steady figures on a shared machine, and a data phase worth a
# loader worker), then asks the saved result what to change and measures it (advise --verify:
# each suggested change in a fresh ablation run); the last line is the answer, predicted and
# measured gains side by side. About 80 s on two busy cores.
demo: $(STAMP)
	$(VENV)/bin/layerscope train digits-cnn --epochs 5 --threads 1 --out runs/demo --html runs/demo/report.html
	$(VENV)/bin/layerscope advise runs/demo/report.json --verify --html runs/demo/advice.html

# Both tiers (unit and integration): what .ci/run runs.
test: $(STAMP)
	$(PY) -m pytest -n 2 tests

# The unit tier alone, for use after every edit: in-process tests, no process started (the
# check in tests/conftest.py fails a test that starts one without the integration marker).
test-quick: $(STAMP)
	$(PY) -m pytest -n 2 -m "not slow and not cuda and not integration" tests

# The tests marked slow (sweeps over every torchvision classifier; minutes).
test-slow: $(STAMP)
	$(PY) -m pytest -n 2 -m slow tests

# The stress loop: the integration tier, 10 rounds in a row beside 2 busy processes, to find
# what fails only now and then (tests/stress.py; half an hour or more a round on 2 cores). The FSDP
# example alone: $(PY) tests/stress.py --fsdp 50 --busy 1
test-stress: $(STAMP)
	$(PY) tests/stress.py --rounds 10 --busy 2

# The CUDA code paths (tests/gpu, marker cuda) on this machine's GPU; every figure they measure
# goes to gpu-check.json (LAYERSCOPE_GPU_CHECK). Without a CUDA device: one line, exit 0.
test-gpu: $(STAMP)
	@PY=$(PY) bash .ci/gpu-check

# The sdist and the wheel in dist/, built as a user's pip would (an isolated build environment).
dist: $(STAMP)
	rm -rf dist build
	$(PY) -m build -o dist .

# The manual (docs/, mkdocs.yml) as a static site in site/; --strict fails on a broken link or a
# missing page. Installs the docs extra when mkdocs is missing (a venv made before it existed).
docs: $(STAMP)
	@$(PY) -c "import mkdocs, material, mkdocstrings" 2>/dev/null || $(PY) -m pip install -q -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) build dist site *.egg-info
