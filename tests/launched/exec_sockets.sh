#!/usr/bin/env bash
# One rank of step_commands.sh's exec-finalized test: whether CMD holds exactly the sockets that its
# process held before `jobkit exec` ran in it (exec keeps the process, and with it every descriptor
# that is not close-on-exec), so that jobkit exec left no socket of its own (a PMIx connection) open.
# usage: exec_sockets.sh before JOBKIT   lists this process's sockets, then execs JOBKIT exec -- this script
#        exec_sockets.sh after           (as CMD) lists them again: prints "rank R: sockets kept (N)", or
#                                        each socket (its /proc link, and ss's lines for it and its peer,
#                                        with the processes that hold them) and exits 3
# The rank's own list, not another step's: slurmstepd (Slurm 22.05) hands its tasks sockets of its own,
# and not always the same ones (see step_commands.sh).
set -uo pipefail

# FD=socket:[INODE], one a line, by fd.
sockets() {
  local f link
  for f in "/proc/$$/fd/"*; do
    link=$(readlink "$f") && [[ $link == socket:* ]] && echo "${f##*/}=$link"
  done
}

if [[ ${1:-} == before ]]; then
  SOCKETS_BEFORE=$(sockets)
  export SOCKETS_BEFORE
  exec "$2" exec -- bash "$0" after
fi
[[ ${1:-} == after && -v SOCKETS_BEFORE ]] || { echo "usage: $0 before JOBKIT"; exit 2; }
now=$(sockets)
if [[ $now == "$SOCKETS_BEFORE" ]]; then
  echo "rank ${SLURM_PROCID:-?}: sockets kept ($(grep -c . <<<"$now"))"
  exit 0
fi
say() { echo "rank ${SLURM_PROCID:-?} socket: $*"; }
say "on $(hostname), before jobkit exec: $(xargs <<<"$SOCKETS_BEFORE"); in CMD: $(xargs <<<"$now")"
while IFS='=' read -r fd link; do
  [[ -n $fd ]] || continue
  if grep -qxF "$fd=$link" <<<"$SOCKETS_BEFORE"; then say "fd $fd: $link"; else say "fd $fd: $link (new)"; fi
  command -v ss >/dev/null || { say "  (no ss here to name its peer)"; continue; }
  inode=${link//[^0-9]/}
  # A Unix socket: its line (its inode, its peer's), then its peer's; a TCP socket: its line (by
  # ino:), then the one whose local address is its peer. A peer inode 0: the other end is closed.
  {
    ss -xanp | awk -v i="$inode" '{line[NR] = $0; local[NR] = $6} $6 == i {mine = NR; peer = $8}
      END {if (mine) {print line[mine]; for (n = 1; n <= NR; n++) if (n != mine && peer && local[n] == peer) print line[n]}}'
    ss -tanpe | awk -v i="$inode" '{line[NR] = $0; local[NR] = $4} $0 ~ ("ino:" i " ") {mine = NR; peer = $5}
      END {if (mine) {print line[mine]; for (n = 1; n <= NR; n++) if (n != mine && local[n] == peer) print line[n]}}'
  } | while read -r line; do say "  $line"; done
done <<<"$now"
exit 3
