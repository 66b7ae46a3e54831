#!/bin/bash
# vm-agent: the guest end of `scripts/vm.sh exec`. It mounts the host directory
# named by the kernel argument vm.share=DIR (hostfs) on /vm, says it is ready in
# /vm/ready, then runs every /vm/exec/ID.cmd the host drops there: output in
# ID.out, exit code in ID.rc (written last, by rename). Idle, it forks nothing:
# it sleeps in `read -t` on a FIFO and lists the directory with a glob, both
# bash builtins (UML is slow at creating processes).
set -u
share=$(sed -n 's/.*vm\.share=\([^ ]*\).*/\1/p' /proc/cmdline)
mkdir -p /vm
mountpoint -q /vm || mount -t hostfs none /vm -o "$share" || { echo "vm-agent: hostfs mount of $share failed" >&2; exit 1; }
mkdir -p /vm/exec
rm -f /run/vm-agent.fifo; mkfifo /run/vm-agent.fifo; exec 9<>/run/vm-agent.fifo
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
printf '%s\n' "$(cut -d' ' -f1 /proc/uptime)" > /vm/ready.tmp && mv /vm/ready.tmp /vm/ready
shopt -s nullglob
while :; do
  for f in /vm/exec/*.cmd; do
    id=${f%.cmd}
    mv "$f" "$id.run" 2>/dev/null || continue
    ( cd / && setsid bash "$id.run" >"$id.out" 2>&1 </dev/null; echo $? >"$id.rc.tmp"; mv "$id.rc.tmp" "$id.rc" ) &
  done
  read -r -t 0.2 -u 9 _
done
