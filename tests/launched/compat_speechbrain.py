"""jobkit.compat.speechbrain on every rank of a step (run by python_compat.py): each function's
multi-rank behaviour, with the expected values computed from jobkit.identity(), so that the checks
hold on any layout. Every rank makes the same collective calls in the same order."""
import os
import tempfile
import types
import uuid

import torch
import torch.distributed

import jobkit
from jobkit.compat import speechbrain as sb

T = 30  # seconds: every wait's deadline


def save(where, text):
    """SpeechBrain's example's writer: one rank per node saves."""
    with open(where, "w") as f:
        f.write(text)
    return "saved"


def load(where):
    """...and the node's others load."""
    with open(where) as f:
        return f.read()


def check_infer_device(me, check) -> None:
    """infer_device() for fixed counts of visible devices (torch.cuda.device_count replaced)."""
    real = torch.cuda.device_count
    cases = [(0, "cpu"), (1, "cuda:0"), (me.local_world_size, f"cuda:{me.local_rank}"),
             (me.local_world_size + 3, f"cuda:{me.local_rank}")]
    if me.local_world_size > 2:
        cases.append((2, jobkit.InvalidEnvironmentError))
    try:
        for count, expected in cases:
            torch.cuda.device_count = lambda: count
            try:
                got = sb.infer_device()
            except jobkit.InvalidEnvironmentError as e:
                got = type(e)
            check(got == expected, f"infer_device() seeing {count} devices: {got!r}, not {expected!r}")
    finally:
        torch.cuda.device_count = real


def run() -> list:
    me = jobkit.identity()
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    check(sb.get_rank() == me.rank and sb.get_local_rank() == me.local_rank,
          f"get_rank() {sb.get_rank()}, get_local_rank() {sb.get_local_rank()}")
    check(sb.rank_prefixed_message("m") == f"[rank: {me.rank}] m", sb.rank_prefixed_message("m"))
    check(sb.is_distributed_initialized() == (me.world_size > 1), "is_distributed_initialized()")
    check(sb.if_main_process() == (me.rank == 0), "if_main_process()")
    check(sb.is_local_rank_zero() == (me.local_rank == 0), "is_local_rank_zero()")
    check(sb.ddp_prevent_block() == (me.world_size == 1), "ddp_prevent_block() outside a section")
    check_infer_device(me, check)

    sb.ddp_barrier(timeout=T)
    last = me.world_size - 1
    check(sb.ddp_broadcast({"rank": me.rank}, src=last, timeout=T) == {"rank": last}, "ddp_broadcast(src=last)")
    tensor = torch.tensor([float(me.rank), 1.0])
    check(sb.ddp_all_reduce(tensor, torch.distributed.ReduceOp.SUM, timeout=T) is tensor
          and tensor.tolist() == [me.world_size * last / 2, me.world_size], f"ddp_all_reduce(SUM): {tensor}")
    average = sb.ddp_all_reduce(torch.tensor([float(me.rank)]), "avg", timeout=T)
    check(average.tolist() == [last / 2], f"ddp_all_reduce(avg): {average}")
    biggest = sb.ddp_all_reduce(2 ** 60 + me.rank, torch.distributed.ReduceOp.MAX, timeout=T)
    check(biggest == 2 ** 60 + last, f"ddp_all_reduce(int, MAX): {biggest}")
    total = sb.ddp_all_reduce(2 ** 53 + me.rank, "sum", timeout=T)
    check(total == me.world_size * 2 ** 53 + me.world_size * last // 2, f"ddp_all_reduce(int, sum) exact: {total}")
    if me.world_size > 1 and not torch.distributed.is_initialized():
        on_gpu = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"), is_cuda=True)
        try:
            sb.ddp_all_reduce(on_gpu, "sum")
            check(False, "ddp_all_reduce(CUDA tensor) without torch.distributed did not raise")
        except jobkit.InvalidArgumentError as e:
            check("needs torch.distributed" in str(e), f"ddp_all_reduce(CUDA tensor): {e}")

    calls = []

    @sb.main_process_only
    def on_main(x):
        calls.append(x)
        sb.ddp_barrier()  # SpeechBrain's guard: no-ops inside the section instead of a deadlock
        return sb.ddp_broadcast(("main", me.rank, x), src=0), sb.ddp_all_reduce(1, "sum")

    result = on_main("x")
    check(result == (("main", 0, "x"), 1), f"main_process_only gave {result!r}")
    check(calls == (["x"] if me.rank == 0 else []), f"main_process_only ran on {calls}")

    @sb.once_per_node
    def per_node():
        sb.ddp_barrier()
        return me.hostname, me.rank

    result = per_node()
    check(result == ((me.hostname, me.rank) if me.local_rank == 0 else None), f"once_per_node gave {result!r}")

    posts = []
    result = sb.run_on_main(lambda a, b: (me.rank, a + b), args=[1], kwargs={"b": 2}, post_func=posts.append,
                            post_args=["post"], timeout=T)
    check(result == (0, 3) and posts == ([] if me.rank == 0 else ["post"]), f"run_on_main: {result!r}, {posts}")
    result = sb.run_on_main(lambda: me.rank, post_func=lambda item: posts.append(item),
                            post_kwargs={"item": "all"}, run_post_on_main=True, timeout=T)
    check(result == 0 and posts[-1] == "all", f"run_on_main(run_post_on_main=True): {result!r}, {posts}")

    # SpeechBrain's example: save on one rank per node, load on the node's others
    key = sb.ddp_broadcast(uuid.uuid4().hex, timeout=T)
    path = os.path.join(tempfile.gettempdir(), f"jobkit-compat-speechbrain-{key}-{me.hostname}")

    result = sb.run_once_per_node(save, args=[path, me.hostname], post_func=load, post_args=[path], timeout=T)
    check(result == ("saved" if me.local_rank == 0 else me.hostname), f"run_once_per_node gave {result!r}")
    result = sb.run_once_per_node(save, args=[path, me.hostname], post_func=load, post_kwargs={"where": path},
                                  run_post_on_all=True, timeout=T)
    check(result == me.hostname, f"run_once_per_node(run_post_on_all=True) gave {result!r}")
    sb.ddp_barrier(timeout=T)
    if me.local_rank == 0:
        os.remove(path)

    if not torch.distributed.is_initialized():  # another seed's checks may have initialised it
        sb.ddp_init_group({"distributed_backend": "gloo"})
        check(torch.distributed.is_initialized() == (me.world_size > 1), "ddp_init_group: initialised?")
        if me.world_size > 1:
            check((torch.distributed.get_rank(), torch.distributed.get_world_size()) == (me.rank, me.world_size),
                  "ddp_init_group: torch's rank and world size")
            ones = torch.ones(2)
            torch.distributed.all_reduce(ones)
            check(ones.tolist() == [me.world_size] * 2, f"torch all_reduce after ddp_init_group: {ones}")
    return failures


def side_by_side(sb, check, ctx) -> None:
    """The checks both SpeechBrain modules take (python_compat.py runs them on jobkit.compat.speechbrain
    and on SpeechBrain's own utils/distributed.py), over torch's process group, with jobkit's identity in
    the variables (jobkit.torch.init_process_group)."""
    me = ctx.me
    last = me.world_size - 1
    check("get_rank(), get_local_rank()", (sb.get_rank(), sb.get_local_rank()), (me.rank, me.local_rank))
    saved = dict(os.environ)
    try:  # SpeechBrain reads RANK, then LOCAL_RANK, SLURM_PROCID...; LOCAL_RANK alone for the local rank
        del os.environ["RANK"]
        check("get_rank() without RANK", sb.get_rank(), me.rank, seed=me.local_rank)
        del os.environ["LOCAL_RANK"]
        check("get_local_rank() without LOCAL_RANK", sb.get_local_rank(), me.local_rank, seed=None)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    check("rank_prefixed_message", sb.rank_prefixed_message("m"), f"[rank: {me.rank}] m")
    check("is_distributed_initialized()", sb.is_distributed_initialized(), me.world_size > 1)
    check("if_main_process()", sb.if_main_process(), me.rank == 0)
    check("is_local_rank_zero()", sb.is_local_rank_zero(), me.local_rank == 0)
    check("ddp_prevent_block() outside a section", sb.ddp_prevent_block(), me.world_size == 1)
    sb.ddp_barrier()
    check("ddp_broadcast(src=last)", sb.ddp_broadcast({"rank": me.rank}, src=last), {"rank": last})
    tensor = torch.tensor([float(me.rank), 1.0])
    check("ddp_all_reduce(SUM) in place", (sb.ddp_all_reduce(tensor, torch.distributed.ReduceOp.SUM) is tensor,
                                           tensor.tolist()), (True, [me.world_size * last / 2, me.world_size]))
    tensor = torch.tensor([me.rank, -me.rank])
    sb.ddp_all_reduce(tensor, torch.distributed.ReduceOp.MAX)
    check("ddp_all_reduce(MAX)", tensor.tolist(), [last, 0])

    calls = []

    @sb.main_process_only
    def on_main(x):
        calls.append(x)
        sb.ddp_barrier()  # a no-op inside the section
        return sb.ddp_broadcast(("main", me.rank, x), src=0)

    check("main_process_only", (on_main("x"), calls), (("main", 0, "x"), ["x"] if me.rank == 0 else []))

    @sb.once_per_node
    def per_node():
        sb.ddp_barrier()
        return me.hostname, me.rank

    check("once_per_node", per_node(), (me.hostname, me.rank) if me.local_rank == 0 else None)
    posts = []
    result = sb.run_on_main(lambda a, b: (me.rank, a + b), args=[1], kwargs={"b": 2}, post_func=posts.append,
                            post_args=["post"])
    check("run_on_main", (result, posts), ((0, 3), [] if me.rank == 0 else ["post"]))
    key = sb.ddp_broadcast(uuid.uuid4().hex)
    path = os.path.join(tempfile.gettempdir(), f"jobkit-compat-speechbrain-{key}-{me.hostname}")

    result = sb.run_once_per_node(save, args=[path, me.hostname], post_func=load, post_args=[path])
    check("run_once_per_node", result, "saved" if me.local_rank == 0 else me.hostname)
    sb.ddp_barrier()
    if me.local_rank == 0:
        os.remove(path)
