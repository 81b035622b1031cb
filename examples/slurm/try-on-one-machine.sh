#!/usr/bin/env bash
# Tries the Slurm example on this one machine: a one-node cluster (single-node-cluster.sh),
# moto's S3 server as the shared cache (scripts/setup.sh installs it into the test
# environment), and the demo show built through `portraits` (its video stages, no language
# model) by SHARDS array tasks in ROUNDS rounds with submit.sh. Passes when the final
# unsharded job finds every result in the shared cache and runs nothing.
#
#   examples/slurm/try-on-one-machine.sh [SHARDS] [ROUNDS]     (as root; VISS=path/to/viss)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
shards="${1:-3}"
rounds="${2:-1}"
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

"$viss" init "$work/project" >/dev/null
"$viss" -C "$work/project" demo --media-only >/dev/null
cat >>"$work/project/viss.toml" <<TOML

[remote]
url = "s3://viss-slurm/demo"
endpoint = "http://127.0.0.1:$port"
region = "us-east-1"
allow_http = true
TOML

export VISS="$viss" VISS_PROJECT="$work/project" VISS_UNTIL=portraits
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
