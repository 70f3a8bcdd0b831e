#!/usr/bin/env bash
# PMIx_Init against a fake PMIx server that accepts the client's connection and never answers, as
# Slurm 24.11-25.11.1 built against OpenPMIx >= 5.0.8 do (openpmix issue 3645). The environment is
# what a PMIx server hands its clients (PMIX_SERVER_URI41 ... PMIX_VERSION; see PMIx_server_setup_fork).
# Checks: jobkit gives up at JOBKIT_PMIX_INIT_TIMEOUT with a timeout error naming the versions and the
# known hang, a second attempt in the same process is refused at once, `jobkit doctor` prints the
# versions before the error, and every process exits normally (no hang, no signal).
# usage: run.sh JOBKIT INIT_CHECK
set -uo pipefail
jobkit=$1
init_check=$2
fail() {
  echo "FAIL: $*"
  exit 1
}
command -v python3 >/dev/null || { echo "SKIP: python3 (the fake PMIx server) is missing"; exit 77; }
work=$(mktemp -d /var/tmp/jobkit-pmix-init.XXXXXX)
server=
cleanup() {
  [[ -n $server ]] && kill "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The fake server: listens on a free loopback port, writes it, counts connections, never answers.
python3 -c '
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
open(sys.argv[1] + "/port.tmp", "w").write(str(s.getsockname()[1]))
__import__("os").rename(sys.argv[1] + "/port.tmp", sys.argv[1] + "/port")
held = []
while True:
    c, _ = s.accept()
    held.append(c)
    open(sys.argv[1] + "/accepted", "a").write("x")
' "$work" &
server=$!
for _ in $(seq 100); do [[ -s $work/port ]] && break; sleep 0.1; done
[[ -s $work/port ]] || fail "the fake PMIx server did not start"
port=$(cat "$work/port")

fake_env=(env -i "PATH=$PATH" "PMIX_NAMESPACE=jobkit-fake.0" "PMIX_RANK=0"
  "PMIX_SERVER_URI41=pmix-server.1;tcp4://127.0.0.1:$port" "PMIX_SERVER_URI4=pmix-server.1;tcp4://127.0.0.1:$port"
  "PMIX_SECURITY_MODE=native" "PMIX_GDS_MODULE=hash" "PMIX_BFROP_BUFFER_TYPE=PMIX_BFROP_BUFFER_NON_DESC"
  "PMIX_SERVER_TMPDIR=$work" "PMIX_SYSTEM_TMPDIR=$work" "PMIX_HOSTNAME=$(hostname)" "PMIX_VERSION=5.0.8"
  "JOBKIT_PMIX_INIT_TIMEOUT=2")

# run NAME CMD...: output in $out, exit status in $status, wall time in $elapsed_ms.
run() {
  local start
  start=$(date +%s%N)
  out=$(timeout 30 "$@" 2>&1)
  status=$?
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  echo "$out"
  echo "exit status $status after $elapsed_ms ms"
  ((status != 124)) || fail "the process hung"
  ((status < 128)) || fail "the process died of a signal ($status)"
}
has() { grep -qF -- "$1" <<<"$out" || fail "no line contains: $1"; }

echo "== jobkit info"
run "${fake_env[@]}" "$jobkit" info
((status == 1)) || fail "exit status $status, expected 1"
((elapsed_ms >= 1900 && elapsed_ms < 10000)) || fail "gave up after $elapsed_ms ms, expected about 2000"
[[ -s $work/accepted ]] || fail "PMIx_Init never reached the fake server"
has "PMIx_Init did not return within 2000 ms (JOBKIT_PMIX_INIT_TIMEOUT)"
has "PMIX_SERVER_URI41=pmix-server.1;tcp4://127.0.0.1:$port"
has "PMIx client library: OpenPMIx "
has "PMIx server: 5.0.8 (PMIX_VERSION)"
has "openpmix issue 3645; fixed in Slurm 25.11.2"
has "must not use PMIx"
grep -q "terminate called" <<<"$out" && fail "std::terminate at exit"

echo "== two runtimes in one process"
run "${fake_env[@]}" "$init_check"
((status == 0)) || fail "exit status $status, expected 0"
grep -qE '^attempt 1: timeout_error after (19[0-9][0-9]|[2-9][0-9]{3}) ms: PMIx_Init did not return' <<<"$out" ||
  fail "the first attempt did not time out after about 2 s"
grep -qE '^attempt 2: error \(pmix\) after [0-9]{1,2} ms: .*an earlier PMIx_Init ran past JOBKIT_PMIX_INIT_TIMEOUT' \
  <<<"$out" || fail "the second attempt was not refused at once"

echo "== jobkit doctor"
run "${fake_env[@]}" "$jobkit" doctor
((status == 1)) || fail "exit status $status, expected 1"
has "jobkit doctor: no identity (the error follows)"
grep -qE '^pmix: client OpenPMIx [0-9.]+.*; server 5\.0\.8 \(PMIX_VERSION\)' <<<"$out" || fail "no pmix versions line"
grep -qE '^slurm: ' <<<"$out" || fail "no slurm line"
has "jobkit: PMIx_Init did not return within 2000 ms"

echo "== a malformed JOBKIT_PMIX_INIT_TIMEOUT"
run "${fake_env[@]}" JOBKIT_PMIX_INIT_TIMEOUT=soon "$jobkit" info
((status == 2)) || fail "exit status $status, expected 2"
has "JOBKIT_PMIX_INIT_TIMEOUT='soon' is not a positive number of seconds"
echo ok
