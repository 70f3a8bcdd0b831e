"""torch's own collectives in the step's report by itself, read from torch's flight recorder.

jobkit reports where every rank is once a jobkit call has waited past its threshold
(JOBKIT_WHERE_REPORT_AFTER; src/where/watch.hpp). For a step started through
``jobkit.torch.init_process_group``, rank 0 also watches torch's collectives where torch lets a
library see them: its flight recorder, read once a second by a daemon thread of rank 0 (a dump of a
few hundred bytes to a few hundred KiB, taken under the recorder's lock; the collectives are not
touched). The oldest collective not yet retired that has waited past the threshold of its own
timeout is reported once, by the same report as jobkit's calls: ``jobkit where`` run on the step,
its folded lines logged under ``[rank: 0] WARNING: torch gloo:barrier at train.py:31 has waited
20 s; ...``.

What torch offers (checked on the torches the suite runs): from torch 2.8 every build records gloo's
and NCCL's collectives (``torch._C._distributed_c10d._dump_fr_trace_json``; 2.15 records by default,
TORCH_FR_BUFFER_SIZE entries, 0 turns it off); 2.5 to 2.7 only NCCL's, in builds with NCCL
(``_dump_nccl_trace_json``, TORCH_NCCL_TRACE_BUFFER_SIZE); earlier ones nothing (Debian 12's torch
1.13, Debian 13's 2.6 built without NCCL). A gloo collective's entry stays "scheduled" until it is
retired: ``retired`` is what tells a collective in progress.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from . import _jobkit

_started = False


class _Dump:
    """One of the recorder's JSON dumps, with the arguments this torch takes."""

    def __init__(self, function: Any, **arguments: Any) -> None:
        self.function = function
        self.arguments = arguments

    def __call__(self) -> bytes:
        return bytes(self.function(includeCollectives=True, onlyActive=False, **self.arguments))


def _dumpers(backend: str) -> List[_Dump]:
    """The recorder's JSON dumps this torch has, for the backends named in ``backend``."""
    import torch._C._distributed_c10d as c10d

    found: List[_Dump] = []
    fr_json: Any = getattr(c10d, "_dump_fr_trace_json", None)
    if fr_json is not None:
        found += [_Dump(fr_json, backend=name) for name in ("gloo", "nccl") if name in backend]
        found.append(_Dump(fr_json))
    nccl_json: Any = getattr(c10d, "_dump_nccl_trace_json", None)
    if nccl_json is not None and "nccl" in backend:
        found.append(_Dump(nccl_json))
    return found


def _entries(dumpers: List[_Dump]) -> List[Dict[str, Any]]:
    entries: List[Dict[str, Any]] = []
    for dump in dumpers:
        try:
            entries.extend(json.loads(dump()).get("entries", []))
        except Exception:  # an argument this torch does not take, a recorder that is off
            continue
    return entries


def _site(entry: Dict[str, Any]) -> str:
    """The caller's file:line of a recorded collective: its first frame outside torch. From the
    Python stack of the thread that waits in it (the entry's ``thread_id``), else from the
    recorder's dump with stacks, taken only when reporting: torch 2.15 takes seconds for it, and a
    report must come while the collective still waits."""
    try:
        frame = sys._current_frames().get(int(entry.get("thread_id") or 0))
        while frame is not None:
            if "/torch/" not in frame.f_code.co_filename:
                return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
            frame = frame.f_back
    except (TypeError, ValueError):
        pass
    try:
        import torch._C._distributed_c10d as c10d

        with_stacks: Any = getattr(c10d, "_dump_fr_trace")
        dump = pickle.loads(with_stacks(includeCollectives=True, includeStackTraces=True, onlyActive=False))
        for candidate in dump.get("entries", []):
            if candidate.get("record_id") != entry.get("record_id"):
                continue
            for recorded in candidate.get("frames", []):
                path = str(recorded.get("filename", ""))
                if "/torch/" not in path:
                    return f"{os.path.basename(path)}:{recorded.get('line')}"
    except Exception:
        pass
    return "an unknown site"


def _oldest_in_progress(entries: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    waiting = [e for e in entries if e.get("retired") is False and e.get("time_created_ns")]
    return min(waiting, key=lambda e: int(e["time_created_ns"])) if waiting else None


def _watch(dumpers: List[_Dump], rank: int) -> None:
    reported: Set[Tuple[Any, Any]] = set()
    while True:
        time.sleep(1)
        entry = _oldest_in_progress(_entries(dumpers))
        if entry is None:
            continue
        key = (entry.get("pg_id"), entry.get("record_id"))
        waited = (time.time_ns() - int(entry["time_created_ns"])) / 1e9
        deadline = float(entry.get("timeout_ms") or 0) / 1000
        # A deadline the rule of spans refuses (negative, past 1e9 s) has no report, as a missing one:
        # where_report_after checks it (the one check).
        try:
            after = _jobkit.where_report_after(deadline)
        except _jobkit.InvalidArgumentError:
            after = 0
        if key in reported or after <= 0 or waited < after:
            continue
        reported.add(key)
        name = f"torch {entry.get('profiling_name', 'collective')}"
        _jobkit.where_report(rank, name, _site(entry), int(waited))


def watch(backend: str, rank: int) -> None:
    """Starts rank 0's watch of torch's collectives, once per process; nothing elsewhere, where the
    step does not report by itself (the library's one rule, src/where/settings.hpp: outside a Slurm
    step, with JOBKIT_WHERE=0 or JOBKIT_WHERE_REPORT_AFTER=0), or where torch records nothing a
    library can read."""
    global _started
    if _started or rank != 0 or not _jobkit.where_reports():
        return
    dumpers = _dumpers(str(backend))
    if not dumpers:
        return
    _started = True
    threading.Thread(target=_watch, args=(dumpers, rank), name="jobkit-torch-where", daemon=True).start()
