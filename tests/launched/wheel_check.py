"""Every rank of the installed wheel under srun --mpi=pmix (tests/launched/wheel.sh).

usage: VENV/bin/python wheel_check.py VERSION

Prints one line per rank: "rank R: wheel ok ..." or "rank R: wheel FAILED: <what>".
"""
import array
import importlib.metadata
import importlib.util
import os
import socket
import sys
import sysconfig

slurm_rank = os.environ.get("SLURM_PROCID", "?")
failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)


def under(path, directory):
    return os.path.commonpath([os.path.realpath(path), os.path.realpath(directory)]) == os.path.realpath(directory)


def env_int(name):
    value = os.environ.get(name, "")
    if not value.isdigit():
        raise ValueError(f"{name}={value!r} is not a number")
    return int(value)


def check(version):
    import jobkit

    # The venv's own package, not a build tree's or the system's.
    expect(sys.prefix != sys.base_prefix, f"not a venv: sys.prefix {sys.prefix}")
    expect("PYTHONPATH" not in os.environ, f"PYTHONPATH is set: {os.environ.get('PYTHONPATH')}")
    site = sysconfig.get_paths()["platlib"]
    expect(under(site, sys.prefix), f"site-packages {site} is not inside the venv {sys.prefix}")
    for module in (jobkit, jobkit._jobkit):
        expect(under(module.__file__, site), f"{module.__name__} from {module.__file__}, not from {site}")
    for module in ("numpy", "torch"):
        expect(importlib.util.find_spec(module) is None, f"{module} is importable in the venv")
    # The wheel's metadata and the extension carry the project's version.
    expect(importlib.metadata.version("jobkit") == version,
           f"metadata version {importlib.metadata.version('jobkit')!r}, project {version!r}")
    expect(jobkit.__version__ == version, f"jobkit.__version__ {jobkit.__version__!r}, project {version!r}")

    # The step's own report runs the wheel's jobkit command: JOBKIT_CLI is the venv's, unset by us.
    command = os.path.join(sysconfig.get_path("scripts"), "jobkit")
    expect(os.environ.get("JOBKIT_CLI") == command, f"JOBKIT_CLI {os.environ.get('JOBKIT_CLI')!r}, not {command!r}")

    # Identity from PMIx against Slurm's own view.
    me = jobkit.identity()
    expect(me.source == "pmix", f"identity source {me.source}")
    for field, name in (("rank", "SLURM_PROCID"), ("world_size", "SLURM_NTASKS"), ("node_rank", "SLURM_NODEID"),
                        ("local_rank", "SLURM_LOCALID"), ("num_nodes", "SLURM_NNODES")):
        expect(getattr(me, field) == env_int(name), f"{field} {getattr(me, field)}, {name} {os.environ.get(name)}")
    expect(me.hostname == socket.gethostname(), f"hostname {me.hostname}, not {socket.gethostname()}")
    world, rank = me.world_size, me.rank

    # Numbers, a barrier, objects.
    expect(jobkit.all_reduce(rank + 1, timeout=60) == world * (world + 1) // 2, "all_reduce of an int")
    expect(jobkit.all_reduce([0.5 * rank, -rank], "max", timeout=60) == [0.5 * (world - 1), 0], "all_reduce max")
    jobkit.barrier(timeout=60)
    got = jobkit.broadcast_object({"from": rank, "version": version}, src=world - 1, timeout=60)
    expect(got == {"from": world - 1, "version": version}, f"broadcast_object gave {got!r}")
    nodes = jobkit.all_gather_object((me.node_rank, me.hostname), timeout=60)
    expect(len(set(nodes)) == me.num_nodes and nodes.count((me.node_rank, me.hostname)) == me.local_world_size,
           f"all_gather_object of (node rank, host): {nodes}")

    # Arrays without numpy: array.array and bytearray through the buffer protocol, in place.
    values = array.array("d", [float(rank), 1.0])
    jobkit.all_reduce(values, "sum", timeout=60)
    expect(list(values) == [world * (world - 1) / 2, float(world)], f"all_reduce of array.array gave {list(values)}")
    buffer = bytearray(f"rank {rank:04d}".encode())
    jobkit.broadcast(buffer, src=world - 1, timeout=60)
    expect(bytes(buffer) == f"rank {world - 1:04d}".encode(), f"broadcast of a bytearray gave {bytes(buffer)!r}")
    for module in ("numpy", "torch"):
        expect(module not in sys.modules, f"{module} was imported")
    return rank


def main():
    if len(sys.argv) != 2:
        print(f"rank {slurm_rank}: wheel FAILED: usage: wheel_check.py VERSION, not {sys.argv[1:]}", flush=True)
        return 2
    try:
        rank = check(sys.argv[1])
    except Exception as e:  # an import or a collective that failed: this rank's line says what
        print(f"rank {slurm_rank}: wheel FAILED: {type(e).__name__}: {e}", flush=True)
        return 1
    if failures:
        print(f"rank {rank}: wheel FAILED: {'; '.join(failures)}", flush=True)
        return 1
    print(f"rank {rank}: wheel ok from {os.path.dirname(sys.modules['jobkit'].__file__)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
