"""jobkit for Python: the identity, helpers and collectives of the C++ library jobkit.

Every function is a binding of the C++ library (the extension ``jobkit._jobkit``): the same
identity discovery (PMIx, then Slurm, then torchrun variables, then single-rank defaults), the same
TCP data path set up through the launcher, the same deadlines (``timeout`` in seconds; None: the
default, JOBKIT_TIMEOUT) and failures that reach every rank. Objects travel as pickles.

Waiting releases the GIL, and a signal handler's exception (Ctrl-C's KeyboardInterrupt) ends a
wait; the world group is then failed for the other ranks, as a rank that left a collective half
done cannot pair with them again. jobkit's errors are ``jobkit.Error`` subclasses named after
their category, and their messages name the rank, its host and the Python caller's file:line.
As in C++, a failed collective leaves the world group unusable in this process, and one collective
at a time: do not call collectives from two threads at once.

The package is a facade: each topic lives in a private module, re-exported here. _identity
(who this process is, the device rule), _logging (rank-aware logging), _helpers (who runs what),
_collectives (groups; objects, numbers and arrays), _workspace (shared directory, node-local
gather), _preemption (stop signals, time limits, requeue), _checkpoints; _timeout holds the one
timeout rule they all use.
"""

import os as _os
from typing import List as _List

from . import _jobkit
from ._jobkit import (
    CudaError,
    Error,
    InternalError,
    InvalidArgumentError,
    InvalidEnvironmentError,
    IoError,
    NcclError,
    PeerFailureError,
    PmixError,
    SchedulerError,
    TimeoutError as TimeoutError,  # explicit re-export: reachable as jobkit.TimeoutError, not in __all__
    __version__,
)

# Call sites in errors are the caller's file:line, outside this directory.
_jobkit.set_package_dir(_os.path.dirname(_os.path.abspath(__file__)))

from ._checkpoints import Checkpoints  # noqa: E402  (the extension is set up above)
from ._collectives import (  # noqa: E402
    Group,
    all_gather,
    all_gather_into,
    all_gather_into_tensor,
    all_gather_object,
    all_reduce,
    barrier,
    broadcast,
    broadcast_into,
    broadcast_object,
    compute_and_broadcast,
    gather,
    gather_from_all_ranks,
    gather_object,
    component_group,
    make_group,
    node_group,
    node_leaders_group,
    reduce_and_broadcast,
    reduce_scatter,
    reduce_scatter_tensor,
    scatter,
    scatter_object,
)
from ._helpers import (  # noqa: E402
    do_n_at_a_time,
    fs_local_rank,
    local_zero_first,
    main_process_only,
    once_per_node,
    run_on_main,
    run_once_per_node,
    zero_first,
)
from ._identity import (  # noqa: E402
    Identity,
    identity,
    is_distributed,
    is_local_main_process,
    is_main_process,
    local_rank,
    local_world_size,
    node_rank,
    num_nodes,
    rank,
    rank_prefixed_message,
    select_device,
    world_size,
)
from ._logging import RankFilter, RankFormatter, install_logging, rank_zero_info, rank_zero_only, rank_zero_warn  # noqa: E402
from ._preemption import StopCause, StopGuard, requeue, stop_requested, time_left  # noqa: E402
from ._progress import long_step, progress  # noqa: E402
from ._workspace import Workspace, node_local_gather  # noqa: E402
from . import _where  # noqa: E402,F401  (registers the stack dump `jobkit where` asks for)

# `from jobkit import *` shadows no built-in: jobkit.TimeoutError (a subclass of the built-in
# TimeoutError) stays reachable by its qualified name but is not exported.
__all__: _List[str] = [
    "Error", "InvalidEnvironmentError", "InvalidArgumentError", "PmixError", "PeerFailureError",
    "NcclError", "CudaError", "IoError", "SchedulerError", "InternalError", "Identity", "identity", "rank",
    "world_size", "local_rank", "local_world_size", "node_rank", "num_nodes", "is_main_process",
    "is_local_main_process", "is_distributed", "rank_prefixed_message", "select_device", "RankFilter",
    "RankFormatter", "install_logging", "rank_zero_only", "rank_zero_info", "rank_zero_warn",
    "barrier", "broadcast_object", "all_gather_object", "broadcast_into", "all_gather_into", "gather_object",
    "scatter_object", "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "gather", "scatter", "Group", "make_group", "node_group", "node_leaders_group",
    "component_group",
    "compute_and_broadcast", "gather_from_all_ranks", "reduce_and_broadcast", "main_process_only",
    "run_on_main", "once_per_node", "run_once_per_node", "zero_first", "local_zero_first", "do_n_at_a_time",
    "fs_local_rank", "Workspace", "node_local_gather", "__version__",
    "StopCause", "StopGuard", "stop_requested", "time_left", "requeue", "Checkpoints", "progress", "long_step",
]
