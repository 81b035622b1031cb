#!/usr/bin/env bash
# Submits a sharded viss build to Slurm: ROUNDS rounds of an array of SHARDS shard jobs, each
# round followed by the assembly of the benchmark-level stages, then one final unsharded job.
# Every job depends on the one before (afterok), so a failed round stops what follows; run
# this again and every result already in the shared cache is taken, not recomputed.
#
#   VISS_PROJECT=/shared/my-benchmark examples/slurm/submit.sh SHARDS [ROUNDS]
#
# The project's viss.toml names the shared cache ([remote], docs/remote-cache.md); the
# credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) are passed to the jobs from this
# environment (--export=ALL), never written to a file. ROUNDS: 3 for a build through the
# export (profile balance, then the export, are the barriers). Too few rounds cost nothing but
# speed: the final unsharded job builds whatever the rounds left.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
shards="${1:?usage: submit.sh SHARDS [ROUNDS]}"
rounds="${2:-3}"
: "${VISS_PROJECT:?set VISS_PROJECT to the project directory}"
export VISS_SHARDS="$shards"
after=()
for _ in $(seq "$rounds"); do
    array=$(sbatch --parsable --export=ALL "${after[@]}" --array="0-$((shards - 1))" \
        "$here/shard.sbatch")
    assembly=$(sbatch --parsable --export=ALL --dependency="afterok:${array}" \
        "$here/assemble.sbatch")
    after=(--dependency="afterok:${assembly}")
done
final=$(sbatch --parsable --export=ALL,VISS_FINAL=1 "${after[@]}" "$here/assemble.sbatch")
echo "$final"
