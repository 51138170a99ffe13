#!/usr/bin/env bash
# A real Slurm on this one machine, for the Slurm executor's tests: Debian's slurm-wlm with
# munge, one controller and two simulated compute nodes (n1, n2: one CPU each, both on
# 127.0.0.1 with their own slurmd port), one partition holding both. Idempotent: packages,
# key and configuration are made once, each daemon is started only when it is not running, and
# it waits until both nodes are idle. Run as root; the daemons' logs are in /var/log/slurm/.
#
#   tests/slurm/start.sh        then: sinfo, sbatch, squeue ... (tests/execute/test_slurm_real.py)
set -euo pipefail

CONF=/etc/slurm/slurm.conf
started=$SECONDS

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! [ -e /usr/lib/x86_64-linux-gnu/libpmix.so ]; then
    echo "installing slurm-wlm, munge and libpmix-dev (Debian packages)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge libpmix-dev >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge libpmix-dev >/dev/null; }
fi

# munge: a key of its own, owned by munge and readable by it alone.
if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! munge -n >/dev/null 2>&1; then
    echo "starting munged"
    runuser -u munge -- munged
    for _ in $(seq 20); do munge -n >/dev/null 2>&1 && break; sleep 0.5; done
fi

# slurm.conf: no cgroups (proctrack/linuxproc, task/none), no accounting daemon (finished jobs
# are read with `sacct -c` from the job completion file), both nodes on one address.
wanted=$(cat <<CONF_TEXT
ClusterName=kit-local
SlurmctldHost=localhost
SlurmUser=root
SlurmctldPort=6817
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
TmpFS=/tmp/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=300
NodeName=n1 NodeAddr=127.0.0.1 Port=17001 CPUs=1 State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 Port=17002 CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF_TEXT
)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /tmp/n1 /tmp/n2
changed=0
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$wanted" ]; then
    printf '%s\n' "$wanted" > "$CONF"
    changed=1
fi

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if [ "$changed" = 1 ]; then  # a new configuration: daemons started with the old one go first
    for pidfile in /run/slurmd-n1.pid /run/slurmd-n2.pid /run/slurmctld.pid; do
        if running "$pidfile"; then kill "$(cat "$pidfile")"; sleep 1; fi
    done
fi
if ! running /run/slurmctld.pid; then
    echo "starting slurmctld"
    slurmctld
    for _ in $(seq 30); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.5; done
fi
for node in n1 n2; do
    if ! running "/run/slurmd-$node.pid"; then
        echo "starting slurmd -N $node"
        slurmd -N "$node"
    fi
done

for _ in $(seq 60); do
    idle=$(sinfo -h -N -t idle,mixed,allocated -o '%N' | sort -u | wc -l)
    [ "$idle" -ge 2 ] && break
    sleep 0.5
done
sinfo -N -o '%N %T %c %P'
[ "$(sinfo -h -N -t idle,mixed,allocated -o '%N' | sort -u | wc -l)" -ge 2 ] \
    || { tail -20 /var/log/slurm/slurmctld.log >&2; echo "the two nodes did not come up" >&2; exit 1; }
echo "Slurm with two nodes up after $((SECONDS - started)) s"
