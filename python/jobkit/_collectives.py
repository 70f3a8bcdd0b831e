"""Collectives of ``import jobkit``: objects (pickled), numbers, and arrays in place, over the world or a Group.

Arrays are CPU torch tensors, numpy arrays or any writable buffer (bytearray, memoryview,
array.array). They are reduced, broadcast and gathered in place, in the caller's memory: jobkit
takes the address, size and dtype (``t.data_ptr()``, ``a.__array_interface__``, the buffer
protocol) and moves the bytes without Python objects and with the GIL released. Every member must
pass the same dtype and shape (per rank sizes only where said): a difference fails on every
member with both ranks and both signatures named. torch is imported only when an argument is a
torch object.

As in torch.distributed, ``src`` and ``dst`` are world ranks, also with ``group=``; the group's
own numbering is ``Group.rank()``. The arguments come in torch.distributed's order: the group right
after the tensors or object and src, dst or op (then async_op, where torch has it), and ``timeout``
is keyword-only after them. A number or timedelta passed where the group (or async_op) goes is refused
with an InvalidArgumentError saying that timeout= is keyword-only.
"""

from __future__ import annotations

import math as _math
import numbers as _numbers
import pickle as _pickle
from datetime import timedelta as _timedelta
from typing import Any, Callable, List, Optional, Sequence, Tuple

from . import _jobkit
from ._jobkit import InvalidArgumentError
from ._timeout import Timeout
from ._timeout import timeout_ms as _timeout_ms

_PROTOCOL = _pickle.HIGHEST_PROTOCOL

_OPS = {"sum": "sum", "prod": "prod", "product": "prod", "min": "min", "max": "max", "avg": "avg",
        "average": "avg", "band": "band", "bor": "bor", "bxor": "bxor"}


def _started() -> None:
    """Starts the runtime (as jobkit.identity() does) before a group or collective is touched."""
    _jobkit.identity()


def _op(op: Any, collective: str) -> str:
    """op's name: a string (any case; "product", "average" too) or torch.distributed.ReduceOp.X."""
    if isinstance(op, str):
        name = op.lower()
    elif type(op).__module__.split(".")[0] == "torch":
        kind = getattr(op, "op", op)  # torch 1.13's ReduceOp holds a RedOpType; torch 2's ReduceOp.SUM is one
        name = str(getattr(kind, "name", None) or str(kind).rsplit(".", 1)[-1]).lower()
    else:
        name = None
    if name not in _OPS:
        raise InvalidArgumentError(f"{collective}: op={op!r} is not one of sum, prod, min, max, avg, band, bor, bxor "
                                   "(strings or torch.distributed.ReduceOp)")
    return _OPS[name]


# ---- Groups ----


class Group:
    """A set of ranks that run collectives together (jobkit::group): made by make_group(),
    node_group(), node_leaders_group(), component_group() or Group.split(). Pass it as ``group=`` to a collective;
    every member must call the same collectives in the same order."""

    def __init__(self, native: "_jobkit.Group") -> None:
        """Wraps the extension's group; made by the functions below, not by callers."""
        self._native = native

    def rank(self) -> int:
        """This process's rank in the group (its position in world_ranks)."""
        return self._native.rank()

    def size(self) -> int:
        """The number of members."""
        return self._native.size()

    @property
    def world_ranks(self) -> List[int]:
        """The members' world ranks, in group-rank order."""
        return list(self._native.world_ranks)

    def split(self, color: int, key: Optional[int] = None, timeout: Timeout = None) -> Optional["Group"]:
        """Collective over the members (MPI_Comm_split): those passing the same color form a new
        group ordered by (key, rank here); key defaults to rank(); a negative color gets None."""
        native = self._native.split(int(color), self.rank() if key is None else int(key), _timeout_ms(timeout))
        return None if native is None else Group(native)

    def __repr__(self) -> str:
        """jobkit.Group(world_ranks=[...])."""
        return f"jobkit.Group(world_ranks={self.world_ranks})"


def make_group(ranks: Sequence[int], timeout: Timeout = None) -> Group:
    """A group of the listed world ranks (group rank i is ranks[i]); collective over them only."""
    _started()
    return Group(_jobkit.make_group([int(r) for r in ranks], _timeout_ms(timeout)))


def node_group() -> Group:
    """The ranks on this process's node."""
    _started()
    return Group(_jobkit.node_group())


def component_group() -> Group:
    """The step's ranks of this process's heterogeneous-job component (Identity.component), in
    component-rank order; the whole step outside a heterogeneous job. Every rank calls it."""
    _started()
    return Group(_jobkit.component_group())


def node_leaders_group() -> Group:
    """Local rank 0 of every node; only those ranks may call it."""
    _started()
    return Group(_jobkit.node_leaders_group())


def _keyword_only(name: str, value: object, collective: str) -> None:
    """Refuses a number or timedelta passed by position where `name` (group, async_op) goes: before
    timeout= became keyword-only, it was a timeout there in some collectives."""
    if isinstance(value, (_numbers.Real, _timedelta)) and not isinstance(value, bool):
        raise InvalidArgumentError(f"{collective}: {name}={value!r}: a number or timedelta where {name} goes; "
                                   f"timeout= is keyword-only (torch.distributed's order: the group follows "
                                   f"the tensor or object and src/dst): pass timeout={value!r}")


def _native(group: Optional[Group], collective: str) -> Optional["_jobkit.Group"]:
    """The extension's group for `group` (None: the world), after starting the runtime."""
    _keyword_only("group", group, collective)
    _started()
    if group is None:
        return None
    if not isinstance(group, Group):
        raise InvalidArgumentError(f"group={group!r}: a jobkit.Group or None (the world)")
    return group._native


def _root(group: Optional[Group], world_rank: int, name: str) -> int:
    """The group rank of world rank `world_rank` (src= / dst=)."""
    if group is None:
        return int(world_rank)
    ranks = group.world_ranks
    if world_rank not in ranks:
        raise InvalidArgumentError(f"{name}={world_rank!r} is not a world rank of {group!r}")
    return ranks.index(world_rank)


def _world_rank() -> int:
    """This process's world rank."""
    return _jobkit.identity()[0]


# ---- Arrays ----

_TYPESTR = {"f2": "float16", "f4": "float32", "f8": "float64", "c8": "complex64", "c16": "complex128",
            "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64", "u1": "uint8", "u2": "uint16",
            "u4": "uint32", "u8": "uint64", "b1": "bool"}
_FORMATS = {"e": "float16", "f": "float32", "d": "float64", "Zf": "complex64", "Zd": "complex128", "b": "int8",
            "B": "uint8", "c": "uint8", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32", "l": "int64",
            "L": "uint64", "q": "int64", "Q": "uint64", "?": "bool"}

View = Tuple[int, int, str, str]


def _torch_view(t: Any, what: str) -> View:
    import torch  # t is a torch object: torch is imported already

    if t.device.type != "cpu":
        raise InvalidArgumentError(
            f"{what} is on device {t.device}: jobkit's collectives take CPU memory; for GPU tensors use "
            "torch.distributed over jobkit.torch.init_process_group('nccl')")
    if t.layout != torch.strided:
        raise InvalidArgumentError(f"{what} has layout {t.layout}: only dense (strided) tensors")
    if not t.is_contiguous():
        raise InvalidArgumentError(f"{what} is not contiguous: pass t.contiguous() and copy the result back "
                                   "(jobkit works in place and does not copy)")
    if getattr(t, "is_conj", None) and t.is_conj() or getattr(t, "is_neg", None) and t.is_neg():
        raise InvalidArgumentError(f"{what} is a lazy conjugate or negative view: call resolve_conj()/resolve_neg()")
    dtype = str(t.dtype).replace("torch.", "")
    return (t.data_ptr(), t.numel() * t.element_size(), dtype, ", ".join(str(d) for d in t.shape))


def _c_strides(shape: Tuple[int, ...], itemsize: int) -> Tuple[int, ...]:
    """The strides, in bytes, of a C-contiguous array of this shape."""
    strides: List[int] = []
    step = itemsize
    for d in reversed(shape):
        strides.insert(0, step)
        step *= d
    return tuple(strides)


def _view(obj: Any, what: str, writable: bool = True) -> View:
    """(address, bytes, dtype, shape) of a CPU tensor, numpy array or buffer, checked."""
    if type(obj).__module__.split(".")[0] == "torch" and hasattr(obj, "data_ptr"):
        return _torch_view(obj, what)
    interface = getattr(obj, "__array_interface__", None)
    if isinstance(interface, dict):
        address, readonly = interface["data"]
        typestr, shape, strides = interface["typestr"], tuple(interface["shape"]), interface.get("strides")
        dtype = _TYPESTR.get(typestr[1:])
        if dtype is None or typestr[0] == ">":
            raise InvalidArgumentError(f"{what} has dtype {typestr!r}, not one jobkit's collectives take")
        if strides is not None and tuple(strides) != _c_strides(shape, int(typestr[2:])):
            raise InvalidArgumentError(f"{what} is not C-contiguous: pass numpy.ascontiguousarray(a) and copy back")
        if writable and readonly:
            raise InvalidArgumentError(f"{what} is read-only")
        count = _math.prod(shape)
        return (address, count * int(typestr[2:]), dtype, ", ".join(str(d) for d in shape))
    try:
        address, size, fmt, _, described = _jobkit.buffer_view(obj, writable)
    except TypeError:
        raise InvalidArgumentError(f"{what} is a {type(obj).__name__}: a CPU torch tensor, a numpy array or a "
                                   "writable buffer is due") from None
    dtype = _FORMATS.get(fmt.lstrip("@=<"))
    if dtype is None:
        raise InvalidArgumentError(f"{what} has buffer format {fmt!r}, not one jobkit's collectives take")
    return (address, size, dtype, described)


def _no_async(async_op: bool, collective: str) -> None:
    """Refuses torch's async_op=True (jobkit's collectives return when done), and a timeout passed
    by position where async_op goes."""
    _keyword_only("async_op", async_op, collective)
    if async_op:
        raise InvalidArgumentError(f"{collective}: async_op=True is not supported: jobkit's collectives complete "
                                   "before they return")


def all_reduce(tensor: Any, op: Any = "sum", group: Optional[Group] = None, async_op: bool = False, *,
               timeout: Timeout = None) -> Any:
    """Reduces every member's tensor element by element into each member's tensor, in place
    (torch.distributed.all_reduce), and returns None. The same on every member, bit for bit.

    A number, or a list or tuple of numbers, is reduced instead and the result returned: integers
    (numbers.Integral: int, bool, numpy integers) as 64-bit integers, others as doubles; avg
    returns floats (a numpy integer's too: its type would truncate the average), any other op a
    number of the type passed.

    op: sum, prod, min, max, avg (floating-point and complex dtypes), band, bor, bxor (integer and
    bool dtypes); strings in any case or torch.distributed.ReduceOp. float16 and bfloat16 are
    reduced in float32 and rounded once at the end; integers wrap. Every member passes the same
    dtype, shape and op.
    """
    _no_async(async_op, "all_reduce")
    name = _op(op, "all_reduce")
    if isinstance(tensor, (_numbers.Number, list, tuple)):
        return _reduce_numbers(tensor, name, group, timeout)
    native = _native(group, "all_reduce")
    _jobkit.array_all_reduce(_view(tensor, "tensor"), name, native, _timeout_ms(timeout))
    return None


def _reduce_numbers(value: Any, name: str, group: Optional[Group], timeout: Timeout) -> Any:
    """all_reduce of a number or a list/tuple of numbers: the result, of the same kind."""
    scalar = not isinstance(value, (list, tuple))
    values = [value] if scalar else list(value)
    native = _native(group, "all_reduce")
    result: Sequence[float]  # ints from the integer reduction
    # Integers reduce as 64-bit integers, except for avg (a float); the C++ library's rule refuses
    # what the values cannot take (bitwise ops on floats).
    if name != "avg" and all(isinstance(v, _numbers.Integral) for v in values):
        result = _jobkit.group_all_reduce_int([int(v) for v in values], name, native, _timeout_ms(timeout))
    else:
        result = _jobkit.group_all_reduce_float([float(v) for v in values], name, native, _timeout_ms(timeout))
    if scalar:
        # Another number type (numpy's) is kept, except an integer's for avg: it would truncate the average.
        if isinstance(value, (int, float)) or (name == "avg" and isinstance(value, _numbers.Integral)):
            return result[0]
        return type(value)(result[0])
    return type(value)(result) if isinstance(value, tuple) else result


def broadcast(tensor: Any, src: int = 0, group: Optional[Group] = None, async_op: bool = False, *,
              timeout: Timeout = None) -> None:
    """src's tensor into every member's tensor, in place (same dtype and shape everywhere)."""
    _no_async(async_op, "broadcast")
    native = _native(group, "broadcast")
    _jobkit.array_broadcast(_view(tensor, "tensor"), _root(group, src, "src"), native, _timeout_ms(timeout))


def all_gather(tensor_list: List[Any], tensor: Any, group: Optional[Group] = None, async_op: bool = False, *,
               timeout: Timeout = None) -> None:
    """Every member's tensor, in rank order, into tensor_list (one tensor of the same dtype per
    member, written in place). Sizes may differ per rank when tensor_list[r] has rank r's size."""
    _no_async(async_op, "all_gather")
    native = _native(group, "all_gather")
    outputs = [_view(t, f"tensor_list[{i}]") for i, t in enumerate(tensor_list)]
    _jobkit.array_all_gather(outputs, _view(tensor, "tensor", False), native, _timeout_ms(timeout))


def all_gather_into_tensor(output_tensor: Any, input_tensor: Any, group: Optional[Group] = None,
                           async_op: bool = False, *, timeout: Timeout = None) -> None:
    """Every member's input_tensor, in rank order, into output_tensor (size() times as many
    elements, e.g. shape [size * n] or [size, n]); input_tensor may be this rank's part of it."""
    _no_async(async_op, "all_gather_into_tensor")
    native = _native(group, "all_gather_into_tensor")
    _jobkit.array_all_gather_flat(_view(output_tensor, "output_tensor"), _view(input_tensor, "input_tensor", False),
                                  native, _timeout_ms(timeout))


def reduce_scatter(output: Any, input_list: List[Any], op: Any = "sum", group: Optional[Group] = None,
                   async_op: bool = False, *, timeout: Timeout = None) -> None:
    """Member r's output receives the reduction (as all_reduce's) of every member's input_list[r].
    Works as an all_reduce of the whole list (each member receives all of it), then keeps its part."""
    _no_async(async_op, "reduce_scatter")
    name = _op(op, "reduce_scatter")
    native = _native(group, "reduce_scatter")
    inputs = [_view(t, f"input_list[{i}]", False) for i, t in enumerate(input_list)]
    _jobkit.array_reduce_scatter(_view(output, "output"), inputs, name, native, _timeout_ms(timeout))


def reduce_scatter_tensor(output: Any, input: Any, op: Any = "sum", group: Optional[Group] = None,
                          async_op: bool = False, *, timeout: Timeout = None) -> None:
    """reduce_scatter with the inputs as one tensor of size() times output's elements."""
    _no_async(async_op, "reduce_scatter_tensor")
    name = _op(op, "reduce_scatter_tensor")
    native = _native(group, "reduce_scatter_tensor")
    _jobkit.array_reduce_scatter(_view(output, "output"), [_view(input, "input", False)], name, native,
                                 _timeout_ms(timeout))


def gather(tensor: Any, gather_list: Optional[List[Any]] = None, dst: int = 0, group: Optional[Group] = None,
           async_op: bool = False, *, timeout: Timeout = None) -> None:
    """Every member's tensor, in rank order, into dst's gather_list (one tensor per member; None
    on the other ranks)."""
    _no_async(async_op, "gather")
    native = _native(group, "gather")
    root = _root(group, dst, "dst")
    outputs = None
    if _world_rank() == dst:
        if gather_list is None:
            raise InvalidArgumentError(f"gather: gather_list is None on dst={dst}: one tensor per member is due")
        outputs = [_view(t, f"gather_list[{i}]") for i, t in enumerate(gather_list)]
    _jobkit.array_gather(_view(tensor, "tensor", False), outputs, root, native, _timeout_ms(timeout))


def scatter(tensor: Any, scatter_list: Optional[List[Any]] = None, src: int = 0, group: Optional[Group] = None,
            async_op: bool = False, *, timeout: Timeout = None) -> None:
    """scatter_list[r] on src into member r's tensor, in place (scatter_list: on src only)."""
    _no_async(async_op, "scatter")
    native = _native(group, "scatter")
    root = _root(group, src, "src")
    inputs = None
    if _world_rank() == src:
        if scatter_list is None:
            raise InvalidArgumentError(f"scatter: scatter_list is None on src={src}: one tensor per member is due")
        inputs = [_view(t, f"scatter_list[{i}]", False) for i, t in enumerate(scatter_list)]
    _jobkit.array_scatter(_view(tensor, "tensor"), inputs, root, native, _timeout_ms(timeout))


def broadcast_into(buffer: Any, src: int = 0, group: Optional[Group] = None, *, timeout: Timeout = None) -> None:
    """src's bytes into every member's buffer, in place: broadcast() under its earlier name."""
    _keyword_only("group", group, "broadcast_into")
    broadcast(buffer, src, group, timeout=timeout)


def all_gather_into(mine: Any, all: Any, group: Optional[Group] = None, *, timeout: Timeout = None) -> None:
    """Every member's mine, in rank order, into all: all_gather_into_tensor(all, mine)."""
    _keyword_only("group", group, "all_gather_into")
    all_gather_into_tensor(all, mine, group, timeout=timeout)


# ---- Objects ----


def barrier(group: Optional[Group] = None, *, timeout: Timeout = None) -> None:
    """Returns when every member has arrived."""
    _jobkit.group_barrier(_native(group, "barrier"), _timeout_ms(timeout))


def broadcast_object(obj: Any, src: int = 0, group: Optional[Group] = None, *, timeout: Timeout = None) -> Any:
    """src's obj on every member (src gets obj itself back)."""
    native, root = _native(group, "broadcast_object"), _root(group, src, "src")
    if _world_rank() == src:
        _jobkit.group_broadcast_bytes(_pickle.dumps(obj, _PROTOCOL), root, native, _timeout_ms(timeout))
        return obj
    return _pickle.loads(_jobkit.group_broadcast_bytes(None, root, native, _timeout_ms(timeout)))


def all_gather_object(obj: Any, group: Optional[Group] = None, *, timeout: Timeout = None) -> List[Any]:
    """Every member's obj, in rank order, on every member."""
    native = _native(group, "all_gather_object")
    parts = _jobkit.group_all_gather_bytes(_pickle.dumps(obj, _PROTOCOL), native, _timeout_ms(timeout))
    return [_pickle.loads(b) for b in parts]


def gather_object(obj: Any, dst: int = 0, group: Optional[Group] = None, *,
                  timeout: Timeout = None) -> Optional[List[Any]]:
    """Every member's obj, in rank order, on dst; None on the other ranks."""
    native, root = _native(group, "gather_object"), _root(group, dst, "dst")
    parts = _jobkit.group_gather_bytes(_pickle.dumps(obj, _PROTOCOL), root, native, _timeout_ms(timeout))
    return [_pickle.loads(b) for b in parts] if _world_rank() == dst else None


def scatter_object(objs: Optional[Sequence[Any]], src: int = 0, group: Optional[Group] = None, *,
                   timeout: Timeout = None) -> Any:
    """objs[r] to member r: objs holds one object per member, read on src only (None elsewhere).

    torch's scatter_object_list semantics; OLMo-core's scatter_object(obj) sends one object to
    every rank, which is broadcast_object here.
    """
    native, root = _native(group, "scatter_object"), _root(group, src, "src")
    parts = None
    if _world_rank() == src:
        if objs is None:
            raise InvalidArgumentError(f"scatter_object: objs is None on src={src}: one object per member is due")
        parts = [_pickle.dumps(o, _PROTOCOL) for o in objs]
    return _pickle.loads(_jobkit.group_scatter_bytes(parts, root, native, _timeout_ms(timeout)))


def compute_and_broadcast(fn: Callable[[], Any], src: int = 0, group: Optional[Group] = None, *,
                          timeout: Timeout = None) -> Any:
    """fn() on src only; its result on every rank. If fn raises, src re-raises it and the other
    ranks raise jobkit.PeerFailureError with its message. Unlike axolotl, any picklable result
    travels exactly (axolotl sends a float32)."""
    holder: List[Any] = []

    def run() -> bytes:
        """fn() on src, kept for src's own result."""
        holder.append(fn())
        return _pickle.dumps(holder[0], _PROTOCOL)

    native, root = _native(group, "compute_and_broadcast"), _root(group, src, "src")
    data = _jobkit.group_compute_and_broadcast_bytes(run, root, native, _timeout_ms(timeout))
    return holder[0] if holder else _pickle.loads(data)


def gather_from_all_ranks(fn: Callable[[], Any], dst: int = 0, group: Optional[Group] = None, *,
                          timeout: Timeout = None) -> Optional[List[Any]]:
    """fn() on every rank; the results, in rank order, on dst (None elsewhere). axolotl's
    world_size argument is not needed."""
    native, root = _native(group, "gather_from_all_ranks"), _root(group, dst, "dst")
    parts = _jobkit.group_gather_from_all_ranks_bytes(lambda: _pickle.dumps(fn(), _PROTOCOL), root, native,
                                                      _timeout_ms(timeout))
    return [_pickle.loads(b) for b in parts] if _world_rank() == dst else None


def reduce_and_broadcast(fn1: Callable[[], Any], fn2: Callable[[List[Any]], Any], group: Optional[Group] = None,
                         *, timeout: Timeout = None) -> Any:
    """fn1() on every rank; fn2(list of every rank's result, in rank order) on rank 0; fn2's
    result on every rank (any picklable object, not axolotl's float32). With group=: its members,
    fn2 on the group's rank 0."""
    def reduce(parts: List[bytes]) -> bytes:
        """fn2 over the unpickled results, pickled."""
        return _pickle.dumps(fn2([_pickle.loads(b) for b in parts]), _PROTOCOL)

    native = _native(group, "reduce_and_broadcast")
    data = _jobkit.group_reduce_and_broadcast_bytes(lambda: _pickle.dumps(fn1(), _PROTOCOL), reduce, native,
                                                    _timeout_ms(timeout))
    return _pickle.loads(data)
