"""torch's own collectives in the step's report and in its progress, read from torch's flight recorder.

jobkit reports where every rank is once a jobkit call has waited past its threshold
(JOBKIT_WHERE_REPORT_AFTER; src/where/watch.hpp), and tracks each rank's progress (docs/progress.md).
For a torch step (a process group made by ``jobkit.torch.init_process_group``, or by torch itself
under ``jobkit exec``: found at the program's first step boundary, ``watch_initialized``), a daemon
thread watches torch's collectives where torch lets a library see them: its flight recorder, whose
JSON dump (a few hundred bytes to a few hundred KiB, taken under the recorder's lock; the
collectives are not touched) it reads once a second or less often, its polls spaced so that they
take at most 0.5 % of a core (_SHARE). What it does with them:

- on rank 0, the step's report by itself: the oldest collective not yet retired that has waited past
  the threshold of its own timeout is reported once, by the same report as jobkit's calls (``jobkit
  where`` run on the step, its folded lines logged under ``[rank: 0] WARNING: torch gloo:barrier at
  train.py:31 has waited 20 s; ...``);
- on every rank that tracks progress: the collective the rank waits in is handed to the tracker,
  whose hang event then places the rank "in torch gloo:all_reduce at train.py:7 for 40 s (torch's
  flight recorder)" rather than outside any jobkit call (the oldest begun since the rank's last
  progress: the tracker picks it); and the waits the recorder timed (NCCL's entries where torch
  times them, TORCH_NCCL_ENABLE_TIMING=1) come off the compute time of the steps they overlap.
  gloo's entries have no end (they stay "scheduled" until retired), so a gloo step's compute time
  still holds its torch waits.

What torch offers (checked on the torches the suite runs): from torch 2.8 every build records gloo's
and NCCL's collectives (``torch._C._distributed_c10d._dump_fr_trace_json``; 2.15 records by default,
TORCH_FR_BUFFER_SIZE entries, 0 turns it off); 2.5 to 2.7 only NCCL's, in builds with NCCL
(``_dump_nccl_trace_json``, TORCH_NCCL_TRACE_BUFFER_SIZE); earlier ones nothing (Debian 12's torch
1.13, Debian 13's 2.6 built without NCCL). A gloo collective's entry stays "scheduled" until it is
retired: ``retired`` is what tells a collective in progress.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from . import _jobkit

_started = False
_looked = False  # watch_initialized has found torch.distributed initialised


class _Dump:
    """One of the recorder's JSON dumps, with the arguments this torch takes. A fallback is read
    only where no other dump of the list answered (the same entries again otherwise)."""

    def __init__(self, function: Any, fallback: bool = False, **arguments: Any) -> None:
        self.function = function
        self.fallback = fallback
        self.arguments = arguments

    def __call__(self) -> bytes:
        return bytes(self.function(includeCollectives=True, onlyActive=False, **self.arguments))


def _dumpers(backend: str) -> List[_Dump]:
    """The recorder's JSON dumps this torch has, for the backends named in ``backend``: one per
    backend where its dump takes ``backend=`` (torch 2.15), else the one without it (its default
    recorder) and, with NCCL, 2.5-2.7's NCCL dump."""
    import torch._C._distributed_c10d as c10d

    found: List[_Dump] = []
    fr_json: Any = getattr(c10d, "_dump_fr_trace_json", None)
    if fr_json is not None:
        found += [_Dump(fr_json, backend=name) for name in ("gloo", "nccl") if name in backend]
        found.append(_Dump(fr_json, fallback=True))
    nccl_json: Any = getattr(c10d, "_dump_nccl_trace_json", None)
    if nccl_json is not None and "nccl" in backend:
        found.append(_Dump(nccl_json, fallback=True))
    return found


def _entries(dumpers: List[_Dump]) -> List[Dict[str, Any]]:
    entries: List[Dict[str, Any]] = []
    answered = False
    for dump in dumpers:
        if dump.fallback and answered:
            continue
        try:
            entries.extend(json.loads(dump()).get("entries", []))
            answered = True
        except Exception:  # an argument this torch does not take, a recorder that is off
            continue
    return entries


def _thread_site(entry: Dict[str, Any]) -> Optional[str]:
    """The caller's file:line of a recorded collective in progress, from the Python stack of the
    thread that waits in it (the entry's ``thread_id``): its first frame outside torch."""
    try:
        frame = sys._current_frames().get(int(entry.get("thread_id") or 0))
        while frame is not None:
            if "/torch/" not in frame.f_code.co_filename:
                return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
            frame = frame.f_back
    except (TypeError, ValueError):
        pass
    return None


def _site(entry: Dict[str, Any]) -> str:
    """The caller's file:line of a recorded collective: from its waiting thread's stack, else from
    the recorder's dump with stacks, taken only when reporting: torch 2.15 takes seconds for it,
    and a report must come while the collective still waits."""
    site = _thread_site(entry)
    if site is not None:
        return site
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


def _in_progress(entries: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The recorded collectives not yet retired, oldest first."""
    waiting = [e for e in entries if e.get("retired") is False and e.get("time_created_ns")]
    return sorted(waiting, key=lambda e: int(e["time_created_ns"]))


def _name(entry: Dict[str, Any]) -> str:
    return f"torch {entry.get('profiling_name', 'collective')}"


def _waits(entries: List[Dict[str, Any]], after_ns: int) -> Tuple[List[Tuple[int, int]], int]:
    """The waits in collectives the recorder timed (NCCL's where torch times them,
    TORCH_NCCL_ENABLE_TIMING=1: ``time_discovered_completed_ns`` with ``duration_ms`` or
    ``time_discovered_started_ns``; gloo's entries have no end) that ended after ``after_ns``,
    clipped to start after it and merged where they overlap, so that no wait is counted twice; and
    the newest end."""
    spans: List[Tuple[int, int]] = []
    for e in entries:
        end = int(e.get("time_discovered_completed_ns") or 0)
        if end <= after_ns:
            continue
        # Its start as timed (duration_ms, time_discovered_started_ns: TORCH_NCCL_ENABLE_TIMING), never
        # its creation: an NCCL collective is queued on the GPU's stream long before it starts.
        duration = float(e.get("duration_ms") or 0)
        if 0 < duration < 1e9:
            begin = end - int(duration * 1e6)
        else:
            begin = int(e.get("time_discovered_started_ns") or 0)
        if begin <= 0:  # an entry with no time of its start is no wait to count
            continue
        begin = max(begin, after_ns)
        if begin < end:
            spans.append((begin, end))
    merged: List[Tuple[int, int]] = []
    for begin, end in sorted(spans):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged, max([after_ns] + [end for _, end in merged])


# The share of a core one rank's watch may take: its polls are spaced by a poll's own CPU time
# (about 30 ms for torch 2.15's 2,000 entries: one poll in 6 s; bench/torch_recorder_watch.py), at
# least 1 s.
_SHARE = 0.005


def _poll(dumpers: List[_Dump], rank: int, reports: bool, tracks: bool, state: Dict[str, Any]) -> None:
    """One look at the recorder."""
    entries = _entries(dumpers)
    in_progress = _in_progress(entries)
    if tracks:
        told = in_progress[:16]  # what the tracker keeps (progress_torch_collectives)
        keys = [(e.get("pg_id"), e.get("record_id")) for e in told]
        if keys != state["told"]:
            state["told"] = keys
            _jobkit.progress_torch_collectives([(_name(e), _thread_site(e) or "", int(e["time_created_ns"]))
                                                for e in told])
        waits, state["timed_until"] = _waits(entries, state["timed_until"])
        if waits:
            _jobkit.progress_torch_waits(waits)
    entry = in_progress[0] if in_progress else None
    key = None if entry is None else (entry.get("pg_id"), entry.get("record_id"))
    if not reports or entry is None or key in state["reported"]:
        return
    waited = (time.time_ns() - int(entry["time_created_ns"])) / 1e9
    deadline = float(entry.get("timeout_ms") or 0) / 1000
    # A deadline the rule of spans refuses (negative, past 1e9 s) has no report, as a missing one:
    # where_report_after checks it (the one check).
    try:
        after = _jobkit.where_report_after(deadline)
    except _jobkit.InvalidArgumentError:
        after = 0
    if after <= 0 or waited < after:
        return
    state["reported"].add(key)
    _jobkit.where_report(rank, _name(entry), _site(entry), int(waited))


def _watch(dumpers: List[_Dump], rank: int, reports: bool, tracks: bool, stop: threading.Event) -> None:
    state: Dict[str, Any] = {"reported": set(), "told": [], "timed_until": time.time_ns()}
    pause = 1.0
    failed = False
    while not stop.wait(pause):
        began = time.thread_time()
        try:
            _poll(dumpers, rank, reports, tracks, state)
            pause = max(1.0, (time.thread_time() - began) / _SHARE)
        except Exception as e:  # an entry this code does not know: the next poll tries again
            if not failed:
                failed = True
                print(f"jobkit: the watch of torch's flight recorder skipped a poll: {e!r}", file=sys.stderr)


def watch(backend: str, rank: int) -> None:
    """Starts this process's watch of torch's collectives, once: on rank 0 for the step's report
    by itself (the library's one rule, src/where/settings.hpp: in a Slurm step, unless JOBKIT_WHERE=0
    or JOBKIT_WHERE_REPORT_AFTER=0), and on every rank that tracks progress (docs/progress.md), whose
    hang event then names the torch collective the rank waits in and whose compute time leaves out
    the waits the recorder timed. Nothing where torch records nothing a library can read."""
    global _started
    # Read on every rank, so that a malformed setting raises on all of them alike.
    reports = _jobkit.where_reports() and rank == 0
    tracks = _jobkit.progress_tracking()
    if _started or not (reports or tracks):
        return
    try:
        dumpers = _dumpers(str(backend))
    except Exception:  # a torch without c10d's bindings: nothing to watch
        return
    if not dumpers:
        return
    _started = True
    _start(dumpers, rank, reports, tracks)


def _start(dumpers: List[_Dump], rank: int, reports: bool, tracks: bool) -> threading.Thread:
    """The watch's thread, ended at the interpreter's exit (atexit, before its finalisation): a
    daemon thread still running then is ended where it next takes the GIL, which from inside
    torch's or jobkit's C++ (a dump, a report) ends the process (std::terminate)."""
    stop = threading.Event()
    thread = threading.Thread(target=_watch, args=(dumpers, rank, reports, tracks, stop),
                              name="jobkit-torch-where", daemon=True)

    def end() -> None:
        stop.set()
        thread.join(timeout=10)

    atexit.register(end)
    thread.start()
    return thread


def watch_initialized() -> None:
    """watch() for a torch script whose process group torch initialised itself (``jobkit exec``
    and env://): called at each of the program's step boundaries (jobkit.progress, StopGuard's
    stop_requested) until torch.distributed is found initialised, then once. A dict lookup a step
    where the program has not imported torch.distributed."""
    global _looked
    if _looked or _started:
        return
    dist: Any = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    _looked = True
    watch(str(dist.get_backend()), int(dist.get_rank()))
