#!/usr/bin/env bash
# Makes this machine a one-node Slurm cluster (Debian's slurm-wlm with munge), to try the
# sharded build in examples/slurm/ before a real cluster. Run as root; safe to run again.
set -euo pipefail

apt_install=()
command -v slurmctld >/dev/null || apt_install+=(slurm-wlm)
command -v munged >/dev/null || apt_install+=(munge)
if [ "${#apt_install[@]}" -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_install[@]}"
fi

node="$(hostname)"
cpus="$(nproc)"
memory_mib="$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))"
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=viss-single-node
SlurmctldHost=${node}
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=${node} CPUs=${cpus} RealMemory=${memory_mib} State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

mkdir -p /run/munge && chown munge:munge /run/munge
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 30); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qE 'idle|mixed'; then
        sinfo
        exit 0
    fi
    sleep 1
done
echo "single-node-cluster: the node did not become idle; see /var/log/slurm/" >&2
sinfo >&2 || true
exit 1
