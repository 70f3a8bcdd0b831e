"""A c10d key-value store for torch.distributed, without MASTER_ADDR or MASTER_PORT.

c10d stores are asynchronous: one rank sets a key, others get or wait for it later, add is
atomic across ranks. jobkit's collectives are synchronous, so they only set the store up: rank 0
keeps the table and serves it on a TCP port of its own host, and broadcasts (address list, port,
a fresh 32-byte token) over jobkit's authenticated data path. Every other rank connects, sends
the token first (rank 0 drops a connection whose first 32 bytes differ), then makes one request at
a time on each connection: a request that finds every connection of its process busy (another
thread waiting on a key, say) opens one more, so that a thread's wait never holds up another
thread's set (torch's TCPStore contract). Rank 0 reads its table directly.

Wire format, both ways: a 4-byte big-endian length, then the message: one operation (or status)
byte and fields, each a 4-byte big-endian length and its bytes. Nothing received is unpickled.
"""

import hmac
import secrets
import socket
import struct
import threading
from datetime import timedelta

import torch.distributed as dist

from . import _jobkit
from ._timeout import milliseconds

_TOKEN_BYTES = 32
_LENGTH = struct.Struct(">I")


def _pack(kind, fields):
    body = bytearray(kind)
    for f in fields:
        body += _LENGTH.pack(len(f)) + f
    return _LENGTH.pack(len(body)) + bytes(body)


def _receive_exactly(sock, size):
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return bytes(data)


def _receive(sock):
    body = _receive_exactly(sock, _LENGTH.size)
    body = _receive_exactly(sock, _LENGTH.unpack(body)[0])
    kind, fields, at = body[:1], [], 1
    while at < len(body):
        (size,) = _LENGTH.unpack_from(body, at)
        fields.append(body[at + 4:at + 4 + size])
        at += 4 + size
    return kind, fields


class _Table:
    """The store's content on rank 0; thread-safe."""

    def __init__(self):
        self._values = {}
        self._changed = threading.Condition()

    def set(self, key, value):
        with self._changed:
            self._values[key] = value
            self._changed.notify_all()

    def get(self, key, timeout):
        if not self.wait([key], timeout):
            return None
        with self._changed:
            return self._values[key]

    def add(self, key, amount):
        with self._changed:
            value = int(self._values.get(key, b"0")) + amount
            self._values[key] = str(value).encode()
            self._changed.notify_all()
            return value

    def compare_set(self, key, expected, desired):
        with self._changed:
            current = self._values.get(key)
            if current is None and expected == b"" or current == expected:
                self._values[key] = desired
                self._changed.notify_all()
                return desired
            return expected if current is None else current

    def wait(self, keys, timeout):
        with self._changed:
            return self._changed.wait_for(lambda: all(k in self._values for k in keys), timeout)

    def check(self, keys):
        with self._changed:
            return all(k in self._values for k in keys)

    def num_keys(self):
        with self._changed:
            return len(self._values)

    def delete_key(self, key):
        with self._changed:
            return self._values.pop(key, None) is not None


def _serve(table, connection, token):
    """One client's requests, until it closes."""
    with connection:
        try:
            connection.settimeout(30)
            if not hmac.compare_digest(_receive_exactly(connection, _TOKEN_BYTES), token):
                return
            connection.settimeout(None)
            while True:
                op, f = _receive(connection)
                connection.sendall(_answer(table, op, f))
        except (ConnectionError, OSError):
            return


def _answer(table, op, f):
    if op == b"S":
        table.set(f[0], f[1])
        return _pack(b"O", [])
    if op == b"G":
        value = table.get(f[0], int(f[1]) / 1000)
        return _pack(b"T", []) if value is None else _pack(b"O", [value])
    if op == b"A":
        return _pack(b"O", [str(table.add(f[0], int(f[1]))).encode()])
    if op == b"C":
        return _pack(b"O", [table.compare_set(f[0], f[1], f[2])])
    if op == b"W":
        return _pack(b"O" if table.wait(f[1:], int(f[0]) / 1000) else b"T", [])
    if op == b"K":
        return _pack(b"O", [b"1" if table.check(f) else b"0"])
    if op == b"N":
        return _pack(b"O", [str(table.num_keys()).encode()])
    if op == b"D":
        return _pack(b"O", [b"1" if table.delete_key(f[0]) else b"0"])
    return _pack(b"E", [b"unknown operation " + op])


def _listen(table, token):
    if socket.has_dualstack_ipv6():
        server = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True, backlog=128)
    else:
        server = socket.create_server(("", 0), backlog=128)

    def accept():
        while True:
            connection, _ = server.accept()
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_serve, args=(table, connection, token), daemon=True,
                             name="jobkit-store-client").start()

    threading.Thread(target=accept, daemon=True, name="jobkit-store").start()
    return server.getsockname()[1]


class StoreTimeoutError(_jobkit.TimeoutError, RuntimeError):
    """A JobkitStore's get or wait that ran out of time: a jobkit.TimeoutError, and the RuntimeError
    with "timeout" in its message that torch's own code catches (its store-based barrier)."""


def _milliseconds(timeout, caller):
    """A store's timeout in milliseconds: torch's 0 (``Store::kNoTimeout``: no timeout) as the longest
    wait jobkit's timeout rule allows (1e9 s), anything else by that rule."""
    return milliseconds(timeout, caller=caller, zero_is_none=True)


def _key(key):
    return key.encode() if isinstance(key, str) else bytes(key)


class JobkitStore(dist.Store):
    """A torch.distributed Store served by rank 0 and found through jobkit (see the module's
    docstring). Collective to create: every rank of the step constructs it at the same point.
    timeout bounds get() and wait() (default 30 minutes, torch's): seconds or a timedelta, more
    than 0, finite and at most 1e9 (jobkit's timeout rule: checked here, and at every get() and
    wait() since torch's set_timeout() sets it unchecked), or 0, torch's ``Store::kNoTimeout``
    (no timeout), which waits the longest the rule allows, 1e9 s."""

    def __init__(self, timeout=timedelta(minutes=30), jobkit_timeout=None):
        super().__init__()
        from . import broadcast_object, identity

        _milliseconds(timeout, "JobkitStore")  # refused before any rank waits
        # torch's own field, a timedelta: a PrefixStore's set_timeout reaches it too
        self.set_timeout(timeout if isinstance(timeout, timedelta) else timedelta(seconds=float(timeout)))
        self._rank = identity().rank
        self._lock = threading.Lock()  # guards _idle
        self._idle = []  # connections to rank 0 no request is using
        self._table = None
        self._where = None
        if self._rank == 0:
            self._table = _Table()
            token = secrets.token_bytes(_TOKEN_BYTES)
            where = ([address for _, address in _jobkit.data_path_addresses()], _listen(self._table, token), token)
        else:
            where = None
        addresses, port, token = broadcast_object(where, 0, timeout=jobkit_timeout)
        if self._table is None:
            self._where = (addresses, port, token)
            self._idle.append(self._connect(addresses, port, token))

    @staticmethod
    def _connect(addresses, port, token):
        failures = []
        for address in addresses:
            try:
                sock = socket.create_connection((address, port), timeout=30)
            except OSError as e:
                failures.append(f"{address}: {e}")
                continue
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(token)
            return sock
        raise _jobkit.PeerFailureError(f"jobkit store: rank {_jobkit.identity()[0]} cannot reach rank 0's store "
                                       f"on port {port}: {'; '.join(failures)}")

    def _request(self, op, fields):
        with self._lock:
            sock = self._idle.pop() if self._idle else None
        if sock is None:
            sock = self._connect(*self._where)
        try:
            sock.sendall(_pack(op, fields))
            status, answer = _receive(sock)
        except BaseException:
            sock.close()  # mid-request: its stream is out of step
            raise
        with self._lock:
            self._idle.append(sock)
        if status == b"E":
            raise _jobkit.InternalError(f"jobkit store: {answer[0].decode()}")
        return status, answer

    @property
    def _timeout(self):
        return self.timeout

    def _timeout_ms(self, caller, timeout=None):
        """timeout, else the store's own, in milliseconds (_milliseconds)."""
        return _milliseconds(timeout if timeout is not None else self._timeout, caller)

    def _timed_out(self, what, ms):
        return StoreTimeoutError(f"jobkit store: timeout: {what} not set within {ms / 1000:g} s (rank {self._rank})")

    def set(self, key, value):
        value = value.encode() if isinstance(value, str) else bytes(value)
        if self._table is not None:
            self._table.set(_key(key), value)
        else:
            self._request(b"S", [_key(key), value])

    def get(self, key):
        ms = self._timeout_ms("JobkitStore.get")
        if self._table is not None:
            value = self._table.get(_key(key), ms / 1000)
            if value is None:
                raise self._timed_out(f"key '{key}'", ms)
            return value
        status, answer = self._request(b"G", [_key(key), str(ms).encode()])
        if status == b"T":
            raise self._timed_out(f"key '{key}'", ms)
        return answer[0]

    def add(self, key, amount):
        if self._table is not None:
            return self._table.add(_key(key), int(amount))
        return int(self._request(b"A", [_key(key), str(int(amount)).encode()])[1][0])

    def compare_set(self, key, expected, desired):
        expected = expected.encode() if isinstance(expected, str) else bytes(expected)
        desired = desired.encode() if isinstance(desired, str) else bytes(desired)
        if self._table is not None:
            return self._table.compare_set(_key(key), expected, desired)
        return self._request(b"C", [_key(key), expected, desired])[1][0]

    def wait(self, keys, timeout=None):
        encoded = [_key(k) for k in keys]
        ms = self._timeout_ms("JobkitStore.wait", timeout)
        if self._table is not None:
            ok = self._table.wait(encoded, ms / 1000)
        else:
            ok = self._request(b"W", [str(ms).encode()] + encoded)[0] == b"O"
        if not ok:
            raise self._timed_out(f"keys {list(keys)}", ms)

    def check(self, keys):
        encoded = [_key(k) for k in keys]
        if self._table is not None:
            return self._table.check(encoded)
        return self._request(b"K", encoded)[1][0] == b"1"

    def num_keys(self):
        if self._table is not None:
            return self._table.num_keys()
        return int(self._request(b"N", [])[1][0])

    def delete_key(self, key):
        if self._table is not None:
            return self._table.delete_key(_key(key))
        return self._request(b"D", [_key(key)])[1][0] == b"1"

    # The names torch's C++ side calls through its trampoline (a PrefixStore around this store).
    getNumKeys = num_keys  # noqa: N815
    deleteKey = delete_key  # noqa: N815

