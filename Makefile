PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# what is installed: everything (test, bench, screenshots); the daemon only (demo);
# the daemon and torch (demo-gpt)
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
GPT_STAMP := $(VENV)/.installed-gpt
# torch==2.13.0 comes from pip's configured index. Where that index's default build is
# CUDA (PyPI on Linux), `make test TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu`.
TORCH_INDEX_URL ?=
TORCH := torch==2.13.0 $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))

# The daemon installs compile the detector core (WTWIN_COMPILE=1, setup.py: C without
# debug info); a plain `pip install .` is the pure wheel the trainer side gets.
COMPILE := WTWIN_COMPILE=1
# `make test` leaves out the tests marked slow (minutes each); `make test-all` (CI) runs them too
PYTEST_ARGS ?=

.PHONY: demo demo-gpt test test-all screenshots bench bench-detection install build clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch 2.13.0 first, always, so that no later install picks a torch build of its own.
$(STAMP): pyproject.toml setup.py detect/build.py | $(BIN)/python
	$(BIN)/pip install -q $(TORCH)
	$(COMPILE) $(BIN)/pip install -q -e '.[daemon,spectral,dask,hf,lightning,wandb,plot,tensorboard,dev]'
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml setup.py detect/build.py | $(BIN)/python
	$(COMPILE) $(BIN)/pip install -q -e '.[daemon]'
	touch $(DEMO_STAMP)

$(GPT_STAMP): pyproject.toml setup.py detect/build.py | $(BIN)/python
	$(BIN)/pip install -q $(TORCH)
	$(COMPILE) $(BIN)/pip install -q -e '.[daemon]'
	touch $(GPT_STAMP)

# The editable install compiles the detector core (WTWIN_COMPILE=1, setup.py); `build`
# recompiles what changed in detect/ since (until then `wtwin.detect` loads the .py files:
# BUILD says so).
install: $(STAMP) build

build: $(STAMP)
	$(BIN)/python setup.py -q build_ext --inplace

# In a terminal the demo ends by printing the caught run's page on DEMO_PORT and serves it
# until Ctrl-C; under CI=true or without a terminal it stops at once (exit 0 when caught).
DEMO_PORT ?= 9470
demo: $(DEMO_STAMP)
	DEMO_PORT=$(DEMO_PORT) $(BIN)/python -m wtwin.offline.daemon_demo

# A tiny GPT trained on CPU with the one-line emitter, LR blow-up at step 300 (examples/tiny_gpt.py).
demo-gpt: $(GPT_STAMP)
	$(BIN)/python examples/tiny_gpt.py --with-daemon --blowup-at 300

test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

screenshots: $(STAMP)  # rewrite docs/screenshots/ from the run pages (headless Chromium)
	WTWIN_UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest "tests/test_web_browser.py::TestBrowser" tests/test_web_par.py

bench: $(STAMP)
	$(BIN)/python tests/bench/run_all.py

bench-detection: $(STAMP)
	$(BIN)/python tests/bench/detection.py

clean:
	rm -rf $(VENV) build *.egg-info
	rm -f detect/*.c detect/*.so detect/*.html detect/_compiled.json
