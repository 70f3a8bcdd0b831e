"""The CPU share of jobkit's watch of torch's flight recorder (python/jobkit/_torch_where.py).

usage: python torch_recorder_watch.py [ENTRIES [SECONDS]]

One process, a gloo group of one rank (torch's own env:// rendezvous on 127.0.0.1): ENTRIES (2000,
torch 2.15's default TORCH_FR_BUFFER_SIZE) all_reduces fill the recorder, then the watch's own loop
(_torch_where._watch, as every tracking rank runs it) polls it for SECONDS (60) while the main
thread sleeps. Prints the dump's CPU time (median of 20 dumps) and the watch thread's CPU time over
the run, from /proc (utime + stime), as a share of one core. Needs a torch with a recorder a library
can read (2.8 and later).
"""

import os
import socket
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist

from jobkit import _torch_where

entries = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
dist.init_process_group("gloo", rank=0, world_size=1)
t = torch.ones(4)
for _ in range(entries):
    dist.all_reduce(t)
dumpers = _torch_where._dumpers("gloo")
assert dumpers, "this torch has no flight recorder a library can read"
recorded = len(_torch_where._entries(dumpers))  # every dump the watch reads, as it reads them
dump_cpu = []
for _ in range(20):
    began = time.thread_time()
    _torch_where._entries(dumpers)
    dump_cpu.append(time.thread_time() - began)

tid = []


def watch() -> None:
    tid.append(threading.get_native_id())
    _torch_where._watch(dumpers, 0, False, True)


def cpu_seconds(task: int) -> float:
    with open(f"/proc/self/task/{task}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


threading.Thread(target=watch, daemon=True).start()
while not tid:
    time.sleep(0.01)
began_cpu, began_wall = cpu_seconds(tid[0]), time.monotonic()
time.sleep(seconds)
spent, wall = cpu_seconds(tid[0]) - began_cpu, time.monotonic() - began_wall
print(f"torch {torch.__version__}: {recorded} entries, a poll's dumps take a median "
      f"{statistics.median(dump_cpu) * 1e3:.1f} ms (min {min(dump_cpu) * 1e3:.1f}); the watch over {wall:.0f} s: "
      f"{spent:.2f} s of CPU, {100 * spent / wall:.3f} % of a core")
dist.destroy_process_group()
