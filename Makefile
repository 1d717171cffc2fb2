PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-gpt test screenshots bench bench-detection install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch 2.13.0 (CPU build, local disk) first, so nothing later pulls a CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[spectral,dask,hf,lightning,wandb,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m wtwin.daemon.demo

# A tiny GPT trained on CPU with the one-line emitter, LR blow-up at step 300 (examples/tiny_gpt.py).
demo-gpt: $(STAMP)
	$(BIN)/python examples/tiny_gpt.py --with-daemon --blowup-at 300

test: $(STAMP)
	$(BIN)/python -m pytest

screenshots: $(STAMP)  # rewrite docs/screenshots/ from the run pages (headless Chromium)
	WTWIN_UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest "tests/test_web.py::TestBrowser"

bench: $(STAMP)
	$(BIN)/python tests/bench/run_all.py

bench-detection: $(STAMP)
	$(BIN)/python tests/bench/detection.py

clean:
	rm -rf $(VENV) build *.egg-info
