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


def main() -> None:
    handler: logging.Handler = jobkit.install_logging("train", level="INFO")
    me: jobkit.Identity = jobkit.identity()
    rank: int = jobkit.rank() + me.local_rank + jobkit.node_rank()
    where: str = jobkit.select_device(visible_count=1) + jobkit.select_device(4, local_rank=2, local_world_size=4)
    saved: Optional[str] = save("/ckpt", rank)
    jobkit.rank_zero_info("%s on %s", where, me.hostname)
    jobkit.rank_zero_warn("slow step", RuntimeWarning)
    try:
        store: jobkit.torch.JobkitStore = jobkit.torch.init_process_group("gloo", timeout=30.0)
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
    print(handler, saved, store, jobkit.torch.device(), is_main_process(), world_size())  # noqa: F405


if __name__ == "__main__":
    main()
