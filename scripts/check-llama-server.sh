#!/usr/bin/env bash
# Runs the demo's `annotate` stage through viss's HTTP backend against a real OpenAI-compatible
# server: llama-cpp-python's, serving the default local GGUF (fetched by `viss models fetch`).
# Not part of CI (building the server takes minutes); docs/development.md reports its last result.
#
#   scripts/check-llama-server.sh            # uses target/release/viss (cargo build --release)
#   VISS_BIN=path/to/viss LLAMA_SERVER_ENV=dir PORT=8089 scripts/check-llama-server.sh
set -euo pipefail
cd "$(dirname "$0")/.."

viss="${VISS_BIN:-target/release/viss}"
server_env="${LLAMA_SERVER_ENV:-$HOME/.cache/viss/llama-server}"
port="${PORT:-8089}"
if [ ! -x "$viss" ]; then
    echo "check-llama-server: $viss is missing; run cargo build --release (or set VISS_BIN)" >&2
    exit 1
fi
if ! "$server_env/bin/python" -c "import llama_cpp.server" >/dev/null 2>&1; then
    echo "check-llama-server: building llama-cpp-python's server in $server_env (minutes)"
    python3 -m venv "$server_env"
    CMAKE_ARGS="-DGGML_NATIVE=OFF" "$server_env/bin/pip" install -q 'llama-cpp-python[server]==0.3.36'
fi
"$viss" models fetch >/dev/null
cache=$("$viss" models list | awk '/^model cache:/ {print $3}')
gguf="$cache/v1/qwen2.5-coder-1.5b-instruct-q4_k_m/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
if [ ! -f "$gguf" ]; then
    echo "check-llama-server: no $gguf; run viss models fetch" >&2
    exit 1
fi

work=$(mktemp -d)
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

"$server_env/bin/python" -m llama_cpp.server --model "$gguf" --model_alias qwen2.5-coder-1.5b \
    --host 127.0.0.1 --port "$port" --n_ctx 8192 >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && break
    sleep 1
done

"$viss" demo --dir "$work/demo" --until parse_script -q >/dev/null
sed -i 's/^annotator = "local"/annotator = "llamacpp:qwen2.5-coder-1.5b"/' "$work/demo/viss.toml"
cat >>"$work/demo/viss.toml" <<EOF

[llm.endpoints.llamacpp]
base_url = "http://127.0.0.1:$port/v1"
timeout_seconds = 600
max_in_flight = 1
EOF
start=$(date +%s)
status=0
"$viss" -C "$work/demo" build --until annotate -q || status=$?
echo "check-llama-server: viss exited $status after $(($(date +%s) - start)) s"
echo "check-llama-server: the server's answers by status:"
grep -o 'POST /v1/chat/completions HTTP/1.1" [0-9]*' "$work/server.log" | sort | uniq -c
exit "$status"
