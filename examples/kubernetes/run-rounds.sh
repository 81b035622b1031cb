#!/usr/bin/env bash
# Runs a sharded viss build on Kubernetes: ROUNDS rounds of an Indexed Job of SHARDS pods, each
# followed by an assembly Job, then the final Job that builds unsharded (taking every result
# from the shared cache) and exports. Each Job is waited for before the next is applied.
#
#   IMAGE=registry.example.org/viss:latest examples/kubernetes/run-rounds.sh SHARDS [ROUNDS] [UNTIL]
#
# Needs: the Secret (secret.yaml), a PersistentVolumeClaim `viss-project` holding the project
# (readable by every pod) and one `viss-output` for the export. With RENDER_TO=DIR it only
# writes the Jobs it would apply into DIR (to read, or to check against the API's schemas).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
shards="${1:?usage: run-rounds.sh SHARDS [ROUNDS] [UNTIL]}"
rounds="${2:-3}"
until="${3:-export}"
: "${IMAGE:?set IMAGE to the viss image (Containerfile)}"
run="viss-$(date +%s)"

apply() { # TEMPLATE NAME MODE
    local job
    job="$(sed -e "s|NAME|$2|" -e "s|SHARDS|$shards|g" -e "s|UNTIL|$until|g" \
        -e "s|IMAGE|$IMAGE|" -e "s|MODE|$3|" "$here/$1")"
    if [ -n "${RENDER_TO:-}" ]; then
        printf '%s\n' "$job" >"$RENDER_TO/$2.yaml"
        return
    fi
    printf '%s\n' "$job" | kubectl apply -f -
    kubectl wait --for=condition=complete --timeout=24h "job/$2"
}

for round in $(seq "$rounds"); do
    apply shards-job.yaml "$run-shards-$round" shard
    apply assemble-job.yaml "$run-assemble-$round" assemble
done
apply assemble-job.yaml "$run-final" final
