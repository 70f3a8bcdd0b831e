"""A user's training script as mypy --strict sees it (the mypy test; it is checked, not run):
every name it uses from jobkit is typed, and a wrong use is an error there."""
import logging
from datetime import timedelta
from typing import List, Optional

import jobkit
import jobkit.torch
from jobkit import *  # noqa: F403  (shadows no built-in: TimeoutError stays the built-in one)


@jobkit.rank_zero_only
def save(path: str, step: int) -> str:
    return f"{path}/{step}"


@jobkit.main_process_only
def prepare(root: str) -> List[str]:
    return [root]


@jobkit.once_per_node(timeout=60.0)
def unpack(root: str) -> int:
    return len(root)


def main() -> None:
    handler: logging.Handler = jobkit.install_logging("train", level="INFO")
    me: jobkit.Identity = jobkit.identity()
    rank: int = jobkit.rank() + me.local_rank + jobkit.node_rank()
    where: str = jobkit.select_device(visible_count=1) + jobkit.select_device(4, local_rank=2, local_world_size=4)
    saved: Optional[str] = save("/ckpt", rank)
    jobkit.rank_zero_info("%s on %s", where, me.hostname)
    jobkit.rank_zero_warn("slow step", RuntimeWarning)
    try:
        store = jobkit.torch.init_process_group("gloo", timeout=30.0)
        authenticated = jobkit.torch.init_process_group("gloo", timeout=30.0, store="jobkit")
    except jobkit.TimeoutError as e:
        code: str = e.code
        raise TimeoutError(code) from e  # the built-in, not shadowed by the * import
    jobkit.torch.init_process_group("gloo", timeout=timedelta(seconds=30))
    node: jobkit.Group = jobkit.node_group()
    half: Optional[jobkit.Group] = node.split(node.rank() % 2, timeout=timedelta(seconds=5))
    peers: List[int] = jobkit.make_group([0, 1], timeout=10).world_ranks
    steps: int = jobkit.all_reduce(rank, "max", group=half)
    losses: List[float] = jobkit.all_reduce([0.5, 0.25], op="avg", group=node, timeout=30.0)
    jobkit.barrier(group=node)
    print(peers, steps, losses)
    files: List[str] = prepare("/data") + jobkit.run_on_main(prepare, ["/data"], post_func=print)
    unpacked: Optional[int] = unpack("/data")
    with jobkit.zero_first():
        tokens: int = jobkit.local_zero_first(len)("abc") + jobkit.do_n_at_a_time(lambda: 1, n=2)
    with jobkit.StopGuard(time_margin=300) as stop, jobkit.Workspace("/ws", group="node", timeout=5.0) as ws:
        ws.write(b"state", config="step=1")
        config, payload = ws.read(0)
        cause: str = stop.cause.reason if stop.stop_requested() else ""
        jobkit.progress()
        jobkit.long_step(60.0)
    latest: Optional[int] = jobkit.Checkpoints("/ckpt", keep=3).latest()
    print(files, unpacked, tokens, config, payload, cause, latest)
    print(handler, saved, store, authenticated, jobkit.torch.device(), is_main_process(), world_size())  # noqa: F405


if __name__ == "__main__":
    main()
