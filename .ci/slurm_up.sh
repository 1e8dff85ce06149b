#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the tests of `papa-sweep --launcher slurm`.
#
# Idempotent: installs Debian's slurmctld, slurmd, munge and slurm-client when missing (root, apt-get), writes a
# munge key and a slurm.conf (the machine's CPUs and memory, one node, one default partition), starts munged,
# slurmctld and slurmd directly (no systemd) when they are not running, and waits until `sinfo` shows the node idle.
# Re-running it while the cluster is up changes nothing. Exit status 0: the cluster is up; otherwise one error line.
set -euo pipefail

CONF_DIR=/etc/slurm
STATE_DIR=/var/spool/slurmctld
SPOOL_DIR=/var/spool/slurmd
LOG_DIR=/var/log/slurm
NODE=$(hostname -s)
WAIT_S=${SLURM_UP_WAIT_S:-60}

fail() { echo "error: slurm_up: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root (apt-get, munge key, daemons); run it as root"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
   || ! command -v munged >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || fail "apt-get update failed"
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null \
    || fail "apt-get install slurmctld slurmd slurm-client munge failed"
fi

# munge: a key readable only by the munge user, then munged as that user
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  rm -f /run/munge/munged.pid
  if command -v runuser >/dev/null; then
    runuser -u munge -- munged || fail "munged did not start (see /var/log/munge/munged.log)"
  else
    su -s /bin/sh munge -c munged || fail "munged did not start (see /var/log/munge/munged.log)"
  fi
  for _ in $(seq 20); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
  munge -n </dev/null | unmunge >/dev/null 2>&1 || fail "munge does not answer (see /var/log/munge/munged.log)"
fi

# slurm.conf: this machine as the one node (as many CPUs and as much memory as slurmd sees, less a margin); a job
# gets its CPUs' share of the memory unless it asks (without DefMemPerCPU a job would hold all of it, one at a time)
CPUS=$(getconf _NPROCESSORS_ONLN)  # not nproc: it honours OMP_NUM_THREADS
MEM_MB=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
install -d -m 0755 "$CONF_DIR" "$STATE_DIR" "$SPOOL_DIR" "$LOG_DIR"
CONF=$(cat <<CONF
# written by .ci/slurm_up.sh: a single-node cluster for the tests
ClusterName=papa
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MinJobAge=300
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
DefMemPerCPU=$((MEM_MB / CPUS))
NodeName=$NODE CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
)
if [ ! -f "$CONF_DIR/slurm.conf" ] || [ "$(cat "$CONF_DIR/slurm.conf")" != "$CONF" ]; then
  printf '%s\n' "$CONF" >"$CONF_DIR/slurm.conf.tmp"
  mv "$CONF_DIR/slurm.conf.tmp" "$CONF_DIR/slurm.conf"
  CHANGED=1
else
  CHANGED=0
fi

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if [ "$CHANGED" -eq 1 ] && running /run/slurmctld.pid; then
  scontrol reconfigure >/dev/null 2>&1 || true
fi
if ! running /run/slurmctld.pid; then
  slurmctld || fail "slurmctld did not start (see $LOG_DIR/slurmctld.log)"
fi
if ! running /run/slurmd.pid; then
  slurmd || fail "slurmd did not start (see $LOG_DIR/slurmd.log)"
fi

# wait until the node takes jobs
for _ in $(seq $((WAIT_S * 2))); do
  state=$(sinfo -h -N -n "$NODE" -o '%t' 2>/dev/null | head -n1 || true)
  case "$state" in
    idle|mix|alloc) echo "slurm_up: node $NODE is $state (partition debug, $CPUS CPUs, ${MEM_MB} MB)"; exit 0 ;;
    down*|drain*|fail*) scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 0.5
done
fail "node $NODE is not idle after ${WAIT_S}s (sinfo state: ${state:-none}; see $LOG_DIR/slurmctld.log, slurmd.log)"
