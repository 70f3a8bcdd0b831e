#!/usr/bin/env python3
"""Reads one trial of bench/recovery_peers.sh, or sums up its results.

    recovery_peers.py torch OUTPUT FAULT_S [LEDGER]  a torchrun or ft_launcher job's output, or jobkit run's
                                                 with its ledger (the same script under jobkit exec): one JSON object
    recovery_peers.py requeue STAMPED FAULT_S    240736d's requeue path: its output, each line prefixed by
                                                 the wall clock it was seen at
    recovery_peers.py stamp FILE OUT STOP         copies FILE's lines to OUT as they come (polled every 20 ms),
                                                 each prefixed by the wall clock, until the file STOP exists
    recovery_peers.py summary RESULTS.jsonl      each kind's median, min and max per phase, and its MTTR's
                                                 ratio to jobkit run's of the same fault (same run)

Times are the wall clock (seconds since the epoch); phases are seconds from the fault (FAULT_S, the
harness's clock right after its kill -9 or its cut).
"""

from __future__ import annotations

import datetime
import json
import re
import statistics
import sys

_GLOG = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d\.\d+) ")
_EPOCH = re.compile(r"^(\d{10}\.\d+) ")
_AT = re.compile(r"recovery_torchrun: rank 0: attempt (\d+): (.*)")


def _line_time(line: str, year: int) -> float | None:
    """The time of an agent's log line: torch's glog-style prefix (local time) or the epoch prefix
    bench/recovery_torchrun.py --agent/--ft-agent gives the Python logging lines."""
    m = _EPOCH.match(line)
    if m:
        return float(m.group(1))
    m = _GLOG.match(line)
    if m:
        month, day, hour, minute, sec = m.groups()
        whole = datetime.datetime(year, int(month), int(day), int(hour), int(minute), int(float(sec)))
        return whole.timestamp() + float(sec) % 1
    return None


def _times(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r"(started|torch imported|world ready|checkpoint loaded|first step done) at (\d+\.\d+)", text)}


def torch_trial(path: str, fault: float, ledger: str | None = None) -> dict:
    year = datetime.datetime.fromtimestamp(fault).year
    lines = open(path, errors="replace").read().splitlines()
    row: dict = {"detected_s": None, "rendezvous_s": None, "workers_started_s": None, "torch_imported_s": None,
                 "world_ready_s": None, "checkpoint_loaded_s": None, "first_step_done_s": None,
                 "resumed_from": None, "restarts_seen": 0, "agent_restarts": 0}
    for line in lines:
        t = _line_time(line, year)
        if t is not None and t >= fault:
            # The agent's first word of the fault: its worker's exit, or (a lost node) the
            # rendezvous's change of members once the lost agent's heartbeats expired.
            failed = any(s in line for s in ("failed (exitcode", "Worker group FAILED", "will restart worker group"))
            if failed and row["detected_s"] is None:
                row["detected_s"] = round(t - fault, 3)
            if "Worker group FAILED" in line or "will restart worker group" in line:
                row["agent_restarts"] += 1
            if "Rendezvous complete for workers" in line and row["rendezvous_s"] is None:
                row["rendezvous_s"] = round(t - fault, 3)
        m = _AT.search(line)
        if not m:
            continue
        times = _times(m.group(2))
        if "started" in times and times["started"] >= fault:
            row["restarts_seen"] += 1
        if row["restarts_seen"] != 1:
            continue  # the first generation of workers started after the fault only
        for key, value in times.items():
            field = key.replace(" ", "_") + "_s"
            if key == "started":
                field = "workers_started_s"
            if row.get(field) is None:
                row[field] = round(value - fault, 3)
        r = re.search(r"resuming from step (\d+)", m.group(2))
        if r:
            row["resumed_from"] = int(r.group(1))
    totals = re.findall(r"finished \d+ steps: total (\d+)", "\n".join(lines))
    row["total"] = int(totals[-1]) if totals else None
    row["mttr_s"] = row["first_step_done_s"]
    if ledger:
        # jobkit run's ledger: the failure seen, and the old step's end and the new one's start from it.
        for line in open(ledger):
            restart = json.loads(line).get("restart")
            if restart:
                phases = restart["phases_s"]
                row["detected_s"] = round(restart["failed"] - fault, 3)
                row["step_ended_s"] = round(row["detected_s"] + phases["failure_to_step_ended"], 3)
                row["step_started_s"] = round(row["step_ended_s"] + phases["step_ended_to_step_started"], 3)
                break
    return row


def requeue_trial(path: str, fault: float, step_s: float) -> dict:
    row: dict = {"detected_s": None, "step_ended_s": None, "job_restarted_s": None, "resumed_s": None,
                 "first_step_done_s": None, "resumed_from": None}
    for line in open(path, errors="replace"):
        stamp, _, text = line.partition(" ")
        try:
            t = float(stamp)
        except ValueError:
            continue
        if t < fault:
            continue
        if row["detected_s"] is None and re.search(r"rank 3|failed|Killed|error", text):
            row["detected_s"] = round(t - fault, 3)
        if row["step_ended_s"] is None and "requeueing" in text:
            row["step_ended_s"] = round(t - fault, 3)
        if row["job_restarted_s"] is None and re.search(r"attempt [1-9][0-9]*: latest checkpoint", text):
            row["job_restarted_s"] = round(t - fault, 3)
        m = re.search(r"attempt [1-9][0-9]*: resuming from step (\d+)", text)
        if m and row["resumed_s"] is None:
            row["resumed_s"] = round(t - fault, 3)
            row["resumed_from"] = int(m.group(1))
            # The example prints this line just before its first step: one step later it is done.
            row["first_step_done_s"] = round(t - fault + step_s, 3)
    row["mttr_s"] = row["first_step_done_s"]
    return row


def stamp(path: str, out: str, stop: str) -> None:
    import os
    import time

    done = False
    with open(out, "a") as sink:
        while not os.path.exists(path) and not os.path.exists(stop):
            time.sleep(0.02)
        with open(path, errors="replace") as source:
            pending = ""
            while True:
                chunk = source.read()
                if chunk:
                    now = time.time()
                    pending += chunk
                    *lines, pending = pending.split("\n")
                    for line in lines:
                        sink.write(f"{now:.3f} {line}\n")
                    sink.flush()
                elif done:
                    break
                else:
                    done = os.path.exists(stop)  # one more read after the stop
                    time.sleep(0.02)


def _recovered(row: dict) -> bool:
    """A first step done after the fault, and the run's result exact (a trial whose restarted
    workers ran a step and then failed did not recover)."""
    return row.get("mttr_s") is not None and row.get("exact", True) is not False


def summary(path: str) -> None:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    kinds: dict[str, list[dict]] = {}
    for r in rows:
        kinds.setdefault(r["kind"], []).append(r)
    base = {}
    for fault, ref in (("kill", "jobkit-kill"), ("lost", "jobkit-lost-spare"), ("kill-torch", "jobkit-kill-torch")):
        v = [r["mttr_s"] for r in kinds.get(ref, []) if _recovered(r)]
        if v:
            base[fault] = statistics.median(v)
    for kind, rs in kinds.items():
        ok = [r for r in rs if _recovered(r)]
        print(f"{kind}: {len(rs)} trials, {len(ok)} recovered (a first step done after the fault, and the exact result)")
        keys = [k for k in rs[0] if k.endswith("_s")]
        for key in keys:
            v = [r[key] for r in (ok or rs) if isinstance(r.get(key), (int, float))]
            if v:
                print(f"  {key:22} median {statistics.median(v):7.2f}  min {min(v):7.2f}  max {max(v):7.2f}  (n={len(v)})")
        fault = "lost" if "lost" in kind else "kill"
        for ref in (fault, "kill-torch") if fault == "kill" else (fault,):
            if ok and ref in base and base[ref] > 0:
                print(f"  MTTR / jobkit run's ({ref}, medians): {statistics.median(r['mttr_s'] for r in ok) / base[ref]:.2f}")


def main() -> int:
    what = sys.argv[1]
    if what == "torch":
        print(json.dumps(torch_trial(sys.argv[2], float(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)))
    elif what == "requeue":
        print(json.dumps(requeue_trial(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else 0.1)))
    elif what == "stamp":
        stamp(sys.argv[2], sys.argv[3], sys.argv[4])
    elif what == "summary":
        summary(sys.argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
