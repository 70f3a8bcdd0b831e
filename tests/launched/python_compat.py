"""jobkit.compat on the dev cluster: every rank runs each seed's checks (tests/launched/compat_<seed>.py,
whose run() returns the failures it saw, an empty list when all held) in the same order and prints
one line per seed, "compat <seed> ok" or "compat <seed> FAILED: ...".
usage: python_compat.py [--shared DIR] [SEED...]   (default: every seed; DIR: a directory every node
sees, for the checks that need one, else this file's directory)
"""
import faulthandler
import importlib.util
import os
import sys
import traceback

import jobkit

SEEDS = ["axolotl", "composer", "modelopt", "olmo_core", "speechbrain"]


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    faulthandler.dump_traceback_later(80)  # a hang shows where each rank waits before srun's 90 s end it
    me = jobkit.identity()
    failed = 0
    seeds = sys.argv[1:]
    if seeds[:1] == ["--shared"]:
        os.environ["COMPAT_SHARED_DIR"], seeds = seeds[1], seeds[2:]
    for seed in seeds or SEEDS:
        spec = importlib.util.spec_from_file_location(f"compat_{seed}", os.path.join(here, f"compat_{seed}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            failures = list(module.run())
        except Exception as e:  # a check that raised: its message and where
            failures = [f"raised {type(e).__name__}: {e} at {traceback.format_exc(limit=-1).strip().splitlines()[-2].strip()}"]
        if failures:
            failed += 1
            print(f"rank {me.rank} ({me.hostname}): compat {seed} FAILED: " + "; ".join(failures), flush=True)
        else:
            print(f"rank {me.rank} ({me.hostname}): compat {seed} ok", flush=True)
    # The seeds' checks keep the process group the first of them made: torch's destroy, once, with
    # every rank past a barrier (torch 2.6's gloo destroy hung now and then on one rank when each
    # seed destroyed its own: seen on Debian 13 on 2026-11-26, not understood yet).
    if "torch" in sys.modules and sys.modules["torch"].distributed.is_initialized():
        sys.modules["torch"].distributed.barrier()
        sys.modules["torch"].distributed.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
