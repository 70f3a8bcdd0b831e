"""The Python module under srun --mpi=pmix (tests/launched/python.sh).

usage: python_check.py MODE [DIR]
  identity        jobkit's identity against Slurm's own view
  semantics DIR   every helper's semantics (as helpers_check.cpp), the object collectives, and a
                  wait that releases the GIL
  throw-main      main_process_only's function raises on rank 0
  die             the last rank dies while the others wait in an all_gather; they raise at once
  hang            rank 2 never arrives; the others' barrier(timeout=2) raises jobkit.TimeoutError
  interrupt       SIGINT (rank 0) and SIGTERM with a handler (rank 1) end their waits at once
  torch           jobkit.torch.init_process_group("gloo") and an all_reduce; nccl fails cleanly
  exec-import     under `jobkit exec`: the identity jobkit finds is the one exec's variables say
"""
import array
import datetime
import os
import signal
import socket
import sys
import threading
import time

import jobkit

failures = 0


def expect(ok, what):
    global failures
    if not ok:
        failures += 1
        print(f"rank {jobkit.rank()}: WRONG: {what}", flush=True)


def timed(helper):
    """helper(work), where work records when it ran here; every rank's (start, end) everywhere."""
    span = [0.0, 0.0]

    def work():
        span[0] = time.time()
        time.sleep(0.15)
        span[1] = time.time()

    helper(work)
    return jobkit.all_gather_object(tuple(span))


def identity():
    me = jobkit.identity()
    expect(me.source == "pmix", f"source {me.source}")
    expect(me.rank == int(os.environ["SLURM_PROCID"]), "rank")
    expect(me.world_size == int(os.environ["SLURM_NTASKS"]), "world_size")
    expect(me.local_rank == int(os.environ["SLURM_LOCALID"]), "local_rank")
    expect(me.node_rank == int(os.environ["SLURM_NODEID"]), "node_rank")
    expect(me.num_nodes == int(os.environ["SLURM_NNODES"]), "num_nodes")
    expect(me.hostname == socket.gethostname(), "hostname")
    expect(me.job_id == os.environ["SLURM_JOB_ID"] and me.step_id == os.environ["SLURM_STEP_ID"], "job and step")
    expect(me.restart_count == int(os.environ.get("SLURM_RESTART_COUNT", "0")), "restart_count")
    nodes = jobkit.all_gather_object(me.node_rank)
    expect(me.local_world_size == nodes.count(me.node_rank), "local_world_size")
    expect(jobkit.is_main_process() == (me.rank == 0) and jobkit.is_distributed(), "predicates")
    try:
        me.rank = 5
        expect(False, "identity is not frozen")
    except AttributeError:
        pass
    expect(jobkit.rank_prefixed_message("hi") == f"[rank: {me.rank}] hi", "rank_prefixed_message")
    print(f"rank {me.rank}: identity {'ok' if failures == 0 else 'WRONG'} {me}", flush=True)


def exec_import():
    """Under `jobkit exec` on any layout: RANK, ... are jobkit's own, and jobkit takes them."""
    me = jobkit.identity()
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK")
    exported = tuple(int(os.environ[name]) for name in names)
    expect((me.rank, me.local_rank, me.world_size, me.local_world_size, me.node_rank) == exported,
           f"identity {me} vs {dict(zip(names, exported))}")
    expect(me.source == "pmix", f"source {me.source}")
    expect(me.rank == int(os.environ["SLURM_PROCID"]), "rank")
    expect(os.environ["JOBKIT_TORCH_VARIABLES"] == ",".join(map(str, exported + (me.num_nodes,))),
           f"JOBKIT_TORCH_VARIABLES={os.environ['JOBKIT_TORCH_VARIABLES']!r}")
    # jobkit's collectives, whose endpoints are published under the same PMIx rank as jobkit exec's
    # own process published its own (this process takes the rank's next turn's key).
    expect(jobkit.all_gather_object(me.rank) == list(range(me.world_size)), "all_gather_object")
    jobkit.barrier()
    print(f"rank {me.rank}: exec-import {'ok' if failures == 0 else 'WRONG'} node {me.node_rank}/{me.num_nodes} "
          f"local {me.local_rank}/{me.local_world_size}", flush=True)


def collectives():
    me = jobkit.identity()
    world = me.world_size
    expect(jobkit.broadcast_object({"from": me.rank}, src=world - 1) == {"from": world - 1}, "broadcast_object")
    expect(jobkit.all_gather_object(me.rank * 10) == [r * 10 for r in range(world)], "all_gather_object")
    hosts = jobkit.all_gather_object(me.hostname)
    expect(jobkit.gather_object(me.hostname, dst=1) == (hosts if me.rank == 1 else None), "gather_object")
    mine = jobkit.scatter_object([f"part {r}" for r in range(world)] if me.rank == 0 else None)
    expect(mine == f"part {me.rank}", "scatter_object")
    expect(jobkit.all_reduce(me.rank) == world * (world - 1) // 2, "all_reduce sum")
    expect(jobkit.all_reduce([me.rank, -me.rank], "max") == [world - 1, 0], "all_reduce max")
    expect(jobkit.all_reduce(1 << me.rank, "bor") == (1 << world) - 1, "all_reduce bor")
    expect(jobkit.all_reduce(0.5, "prod") == 0.5 ** world, "all_reduce prod")
    expect(jobkit.compute_and_broadcast(lambda: me.hostname) == jobkit.broadcast_object(me.hostname), "c&b")
    expect(jobkit.reduce_and_broadcast(lambda: me.rank, sorted) == list(range(world)), "reduce_and_broadcast")
    # Bulk data in the caller's buffers: 3 MiB from the last rank, then each rank's 4 integers.
    big = bytearray(bytes(range(256)) * (3 * 4096) if me.rank == world - 1 else 3 << 20)
    jobkit.broadcast_into(big, src=world - 1)
    expect(big == bytes(range(256)) * (3 * 4096), "broadcast_into")
    parts = array.array("q", [0] * (4 * world))
    jobkit.all_gather_into(array.array("q", [me.rank * 4 + k for k in range(4)]), parts)
    expect(list(parts) == list(range(4 * world)), "all_gather_into")


def gil_released():
    """While rank 0 waits in a barrier that the others enter 1 s late, its Python thread runs."""
    ticks = [0]
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.01)

    if jobkit.rank() == 0:
        thread = threading.Thread(target=tick)
        thread.start()
        jobkit.barrier()
        stop.set()
        thread.join()
        expect(ticks[0] >= 50, f"the barrier held the GIL: {ticks[0]} ticks in 1 s")
    else:
        time.sleep(1)
        jobkit.barrier()


def semantics(shared):
    me = jobkit.identity()
    nodes = jobkit.all_gather_object(me.node_rank)
    local_ranks = jobkit.all_gather_object(me.local_rank)
    collectives()
    gil_released()

    here = [0]

    @jobkit.main_process_only
    def prepare():
        here[0] += 1
        return "from " + me.hostname

    value = prepare()
    expect(jobkit.all_reduce(here[0]) == 1, "main_process_only ran other than once")
    expect(value == "from " + jobkit.broadcast_object(me.hostname), "main_process_only result differs")

    @jobkit.once_per_node
    def node_work():
        return me.node_rank

    once = node_work()
    expect((once is not None) == (me.local_rank == 0), "once_per_node ran on the wrong rank")
    expect(jobkit.all_reduce(1 if once is not None else 0) == me.num_nodes, "once_per_node count")

    marker = os.path.join(shared, f"run_on_main.{me.job_id}.{me.step_id}")
    saw = [True]

    def write():
        with open(marker, "w") as f:
            f.write("ready")
        return 42

    def look():
        saw[0] = os.path.exists(marker)

    expect(jobkit.run_on_main(write, post_func=look) == 42, "run_on_main result")
    expect(saw[0], "run_on_main post_func ran before the main rank's func finished")
    jobkit.main_process_only(lambda: os.remove(marker))()

    result = jobkit.run_once_per_node(lambda: "ran", post_func=lambda: "post")
    expect(result == ("ran" if me.local_rank == 0 else "post"), f"run_once_per_node result {result}")

    def check_first(spans, per_node, what):
        for r in range(me.world_size):
            for first in range(me.world_size):
                leads = (local_ranks[first] == 0 and nodes[first] == nodes[r]) if per_node else first == 0
                if leads and r != first:
                    expect(spans[r][0] >= spans[first][1], f"{what}: rank {r} started before rank {first} ended")

    check_first(timed(lambda work: jobkit.zero_first(work)()), False, "zero_first(fn)")
    check_first(timed(lambda work: jobkit.local_zero_first(work)()), True, "local_zero_first(fn)")

    def in_block(per_node):
        def run(work):
            with (jobkit.local_zero_first() if per_node else jobkit.zero_first()):
                work()
        return run

    check_first(timed(in_block(False)), False, "with zero_first()")
    check_first(timed(in_block(True)), True, "with local_zero_first()")

    rounds = timed(lambda work: jobkit.do_n_at_a_time(work))
    for a in range(me.world_size):
        for b in range(a + 1, me.world_size):
            overlap = rounds[a][0] < rounds[b][1] and rounds[b][0] < rounds[a][1]
            expect(not (nodes[a] == nodes[b] and overlap), "do_n_at_a_time: two ranks of one node ran at once")
    pairs = timed(lambda work: jobkit.do_n_at_a_time(work, n=2))
    for a in range(me.world_size):
        concurrent = sum(1 for b in range(me.world_size) if pairs[b][0] <= pairs[a][0] < pairs[b][1])
        expect(concurrent <= 2, "do_n_at_a_time(n=2): more than 2 ranks at once")

    expect(jobkit.fs_local_rank(shared) == me.rank, "fs_local_rank of the shared tree is not the global rank")
    expect(jobkit.fs_local_rank("/tmp") == me.local_rank, "fs_local_rank of /tmp is not the local rank")

    with jobkit.Workspace(shared) as ws:
        ws.write(bytes([me.rank]) * 3, config=f"rank {me.rank}")
        peer = (me.rank + 1) % me.world_size
        expect(ws.read(peer) == (f"rank {peer}", bytes([peer]) * 3), "workspace read")
        jobkit.barrier()
    states, route = jobkit.node_local_gather(me.hostname.encode(), config=str(me.rank), group="node")
    if me.local_rank == 0:
        expect(route == "shared_memory" and len(states) == me.local_world_size, f"node_local_gather {route}")
    print(f"rank {me.rank}: semantics {'ok' if failures == 0 else 'WRONG'}", flush=True)


def throw_main():
    @jobkit.main_process_only
    def download():
        raise ValueError("tokenizer download failed")

    try:
        download()
    except jobkit.PeerFailureError as e:
        print(f"rank {jobkit.rank()}: peer failure: {e}", flush=True)
    except ValueError as e:
        print(f"rank {jobkit.rank()}: own exception: {e}", flush=True)


def die():
    """As collectives_check.cpp's die: the last rank exits between two of 100 all_gathers, so the
    others wait for it inside the next one."""
    me = jobkit.identity()
    jobkit.barrier()  # the data path is up
    try:
        for i in range(100):
            if i == 50 and me.rank == me.world_size - 1:
                os._exit(1)
            entered = time.monotonic()
            jobkit.all_gather_object((me.rank, i))
        print(f"rank {me.rank}: finished without noticing the death", flush=True)
    except jobkit.PeerFailureError as e:
        print(f"rank {me.rank}: raised after {time.monotonic() - entered:.2f} s in all_gather #{i}: {e}", flush=True)


def hang():
    me = jobkit.identity()
    jobkit.barrier()
    if me.rank == 2:
        time.sleep(6)
        return
    start = time.monotonic()
    try:
        jobkit.barrier(timeout=2)
    except jobkit.TimeoutError as e:
        print(f"rank {me.rank}: timeout after {time.monotonic() - start:.2f} s: {e}", flush=True)


def interrupt(which):
    """One signal to one rank waiting in a barrier: SIGINT to rank 0 (KeyboardInterrupt) or SIGTERM
    to rank 1 (its handler's SystemExit). That rank's wait ends; the others raise at once."""
    me = jobkit.identity()
    jobkit.barrier()
    target = 0 if which == "SIGINT" else 1
    if me.rank == 1:
        signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(143))
    if me.rank == target:
        threading.Timer(1.0, lambda: os.kill(os.getpid(), getattr(signal, which))).start()
    else:
        time.sleep(0.5 if me.rank in (0, 1) else 4)
    start = time.monotonic()
    try:
        jobkit.barrier(timeout=30)
        print(f"rank {me.rank}: WRONG: the barrier passed", flush=True)
    except (KeyboardInterrupt, SystemExit) as e:
        print(f"rank {me.rank}: interrupted ({type(e).__name__}) after {time.monotonic() - start:.2f} s", flush=True)
    except jobkit.Error as e:
        print(f"rank {me.rank}: raised {type(e).__name__} after {time.monotonic() - start:.2f} s: {e}", flush=True)


def torch_check():
    import torch
    import torch.distributed as dist

    import jobkit.torch

    for key in ("MASTER_ADDR", "MASTER_PORT"):
        expect(key not in os.environ, f"{key} is set")
    try:
        jobkit.torch.init_process_group("nccl")
        expect(False, "nccl initialised without a GPU")
    except (jobkit.NcclError, jobkit.CudaError) as e:
        print(f"rank {jobkit.rank()}: nccl refused: {type(e).__name__}: {e}", flush=True)
    me, world = jobkit.rank(), jobkit.world_size()
    for kind in (None, "jobkit"):  # torch's TCPStore found through jobkit, then the JobkitStore
        raw = jobkit.torch.init_process_group("gloo", store=kind)
        expect(dist.get_rank() == me and dist.get_world_size() == world, "torch identity")
        store = dist.PrefixStore("check", raw)  # as init_process_group wraps it for torch's own use
        store.set(f"rank{me}", str(me))
        store.wait([f"rank{r}" for r in range(world)])
        expect(store.get(f"rank{(me + 1) % world}") == str((me + 1) % world).encode(), f"store {kind} get")
        store.add("count", 1)
        claimed = store.compare_set("owner", "", str(me))
        jobkit.barrier()
        expect(store.add("count", 0) == world, f"store {kind} add")
        expect(len(set(jobkit.all_gather_object(claimed))) == 1 and store.get("owner") == claimed,
               f"store {kind} compare_set")
        expect(store.num_keys() >= world + 2, f"store {kind} num_keys")
        start = time.monotonic()
        try:
            store.wait(["absent"], datetime.timedelta(seconds=0.3))
            expect(False, f"store {kind}: a wait for an absent key returned")
        except RuntimeError as e:  # what torch's own code catches
            expect("timeout" in str(e).lower() and time.monotonic() - start < 10, f"store {kind} timeout: {e}")
        if kind == "jobkit":
            # A key set by another thread of this rank while this one waits for it (a case of
            # torch's store tests; Debian 12's torch 1.13 TCPStore client blocks the set until the
            # wait times out, torch 2.x's libuv one does not).
            setter = threading.Timer(0.2, store.set, args=(f"thread{me}", "set"))
            setter.start()
            try:
                store.wait([f"thread{me}"], datetime.timedelta(seconds=20))
                expect(store.get(f"thread{me}") == b"set", f"store {kind}: the other thread's value")
            except RuntimeError as e:
                expect(False, f"store {kind}: a key another thread set was not seen by the waiter: {e}")
            setter.join()
        jobkit.barrier()
        if me == 0:
            expect(store.delete_key("owner"), f"store {kind} delete_key")
        value = torch.tensor([float(me + 1)])
        dist.all_reduce(value)
        expect(value.item() == world * (world + 1) / 2, f"all_reduce gave {value.item()}")
        dist.barrier()
        dist.destroy_process_group()
    print(f"rank {jobkit.rank()}: torch {'ok' if failures == 0 else 'WRONG'} all_reduce {value.item():g}", flush=True)


def preempt(shared):
    """A running sum over 40 steps of 100 ms, checkpointed when the ranks agree to stop, resumed by
    the next run (the script signals one rank of the first run)."""
    me = jobkit.rank()
    with open(os.path.join(shared, f"pid.{me}"), "w") as f:
        f.write(str(os.getpid()))
    with jobkit.StopGuard() as stop:
        saved = jobkit.Checkpoints(os.path.join(shared, "ckpt"))
        step, total = 0, 0
        latest = saved.latest()
        if latest is not None:
            saved.verify(latest)
            with open(os.path.join(saved.part(latest), "state")) as f:
                step, total = map(int, f.read().split())
            print(f"rank {me}: resumed from step {latest}", flush=True)
        while step < 40:
            time.sleep(0.1)
            total += (me + 1) * (step + 1)
            step += 1
            if stop.stop_requested():
                with open(os.path.join(saved.begin(step), "state"), "w") as f:
                    f.write(f"{step} {total}")
                saved.commit()
                print(f"rank {me}: stop at step {step}: {stop.cause}", flush=True)
                return
        totals = jobkit.all_gather_object(total)
        print(f"rank {me}: finished with total {sum(totals)}", flush=True)


def main():
    mode = sys.argv[1]
    if mode == "identity":
        identity()
    elif mode == "semantics":
        semantics(sys.argv[2])
    elif mode == "throw-main":
        throw_main()
    elif mode == "die":
        die()
    elif mode == "hang":
        hang()
    elif mode == "interrupt":
        interrupt(sys.argv[2])
    elif mode == "torch":
        torch_check()
    elif mode == "preempt":
        preempt(sys.argv[2])
    elif mode == "exec-import":
        exec_import()
    else:
        raise SystemExit(f"unknown mode {mode}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
