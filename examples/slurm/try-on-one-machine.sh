#!/usr/bin/env bash
# Tries the Slurm example on this one machine: a one-node cluster (single-node-cluster.sh),
# moto's S3 server as the shared cache (scripts/setup.sh installs it into the test
# environment), viss's scripted mock model as the language model, and the demo show (video,
# images and every construction stage; SHOW=text: a text show of EPISODES episodes, default 6)
# built through its export by SHARDS array tasks in ROUNDS rounds with submit.sh. Passes when
# the final unsharded job finds every result in the shared cache and runs nothing, and its
# viss.lock is byte for byte that of the same show built on one machine.
#
#   examples/slurm/try-on-one-machine.sh [SHARDS] [ROUNDS]     (as root; VISS=path/to/viss)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
shards="${1:-3}"
rounds="${2:-3}"
episodes="${EPISODES:-6}"
show="${SHOW:-demo}"
viss="$(command -v "${VISS:-viss}")"
env_dir="${VISS_TEST_PYTHON_ENV:-$HOME/.cache/viss/test-python}"
work="$(mktemp -d /tmp/viss-slurm.XXXXXX)"
echo "working in $work"

"$here/single-node-cluster.sh" >/dev/null

port="$("$env_dir/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$env_dir/bin/moto_server" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
moto=$!
trap 'kill "$moto" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.2
done
export AWS_ACCESS_KEY_ID=viss-try-key AWS_SECRET_ACCESS_KEY=viss-try-secret
"$env_dir/bin/python" -c "import boto3; boto3.client('s3', endpoint_url='http://127.0.0.1:$port', region_name='us-east-1').create_bucket(Bucket='viss-slurm')"

# The language model: viss's scripted mock, an OpenAI-compatible server on this machine.
"$viss" bench mock-endpoint --latency-ms 50 >"$work/mock.out" 2>"$work/mock.log" &
mock=$!
trap 'kill "$moto" "$mock" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    grep -q '^base_url ' "$work/mock.out" 2>/dev/null && break
    sleep 0.2
done
base_url="$(sed -n 's/^base_url //p' "$work/mock.out")"

# The demo show, or a text show of EPISODES episodes (no video: the text and language-model
# stages) written as a fan transcript, each episode its own lines.
make_project() { # DIR [REMOTE-PREFIX]
    "$viss" init "$1" >/dev/null
    if [ "$show" = demo ]; then
        "$viss" -C "$1" demo --media-only >/dev/null
    else
        write_text_show "$1"
    fi
    sed -i -e 's/^annotator = "local"/annotator = "mock:scripted"/' \
        -e 's/^writer = "local"/writer = "mock:scripted"/' \
        -e 's/^describer = "local"/describer = "mock:scripted"/' \
        -e 's/^agents = \["local"\]/agents = ["mock:scripted"]/' \
        -e 's/^judges = \["local"\]/judges = ["mock:scripted"]/' "$1/viss.toml"
    printf '\n[llm.endpoints.mock]\nbase_url = "%s"\nmax_in_flight = 4\n' "$base_url" \
        >>"$1/viss.toml"
    if [ -n "${2:-}" ]; then
        printf '\n[remote]\nurl = "s3://viss-slurm/%s"\nendpoint = "http://127.0.0.1:%s"\n' \
            "$2" "$port" >>"$1/viss.toml"
        printf 'region = "us-east-1"\nallow_http = true\n' >>"$1/viss.toml"
    fi
}

write_text_show() { # DIR
    mkdir -p "$1/raw/try"
    printf 'license = "Synthetic text written by try-on-one-machine.sh, CC0."\n\n' \
        >"$1/manifests/shows/try.toml"
    for e in $(seq -w 1 "$episodes"); do
        for scene in 1 2; do
            printf '[Scene: Flat %s-%s, boxes everywhere. Ada and Ben.]\n' "$e" "$scene"
            for line in $(seq 12); do
                who=Ada; [ $((line % 2)) = 0 ] && who=Ben
                printf '%s: Box %s of flat %s-%s is not taped, and the van comes at %s.\n' \
                    "$who" "$line" "$e" "$scene" "$line"
            done
            printf '\n'
        done >"$1/raw/try/e$e.txt"
        printf '[[episodes]]\nid = "e%s"\nscript = "try/e%s.txt"\n\n' "$e" "$e" \
            >>"$1/manifests/shows/try.toml"
    done
}

# The reference: one machine, no shared cache.
make_project "$work/one-machine"
"$viss" -C "$work/one-machine" build --until export >"$work/one-machine.log" 2>&1
"$viss" -C "$work/one-machine" export >>"$work/one-machine.log" 2>&1

make_project "$work/project" sharded
export VISS="$viss" VISS_PROJECT="$work/project" VISS_UNTIL=export
export VISS_LOCAL_STORES="$work/stores" VISS_REPORT="$work/final-report.json"
cd "$work"
final="$("$here/submit.sh" "$shards" "$rounds")"
echo "submitted; the final job is $final"
while squeue -h 2>/dev/null | grep -q .; do
    sleep 5
done
if [ ! -s "$VISS_REPORT" ]; then
    echo "the final job wrote no report; the job logs are in $work" >&2
    exit 1
fi
"$env_dir/bin/python" - "$VISS_REPORT" "$work" <<'PY'
import glob, json, re, sys
report = json.load(open(sys.argv[1]))
ran = {stage: counts["ran"] for stage, counts in report["stages"]}
remote = report.get("remote", {})
shard_logs = sorted(glob.glob(sys.argv[2] + "/viss-shard-*.log"))
print(f"{len(shard_logs)} shard job(s); the final unsharded build ran {sum(ran.values())} "
      f"item(s) and took {remote.get('actions_found')} result(s) from the shared cache")
for log in shard_logs:
    text = open(log).read()
    taken = re.search(r"remote cache: (\d+) result\(s\) taken", text)
    shared = re.search(r"(\d+) shared \(", text)
    print(f"  {log.rsplit('/', 1)[-1]}: took {taken and taken.group(1)}, "
          f"shared {shared and shared.group(1)}")
sys.exit(0 if sum(ran.values()) == 0 and report["failures"] == [] else 1)
PY
if cmp "$work/one-machine/export/viss.lock" "$work/project/export/viss.lock"; then
    echo "the sharded build's viss.lock is the single machine's, byte for byte"
else
    echo "the sharded build's viss.lock differs from the single machine's" >&2
    exit 1
fi
