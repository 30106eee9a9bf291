"""Allreduce through an aggswitch switch, from Python.

One :class:`Client` per job and rank; every rank issues the same allreduces in
the same order. Each allreduce sends the rank's buffer to the switch once and
receives the reduced buffer once, written over the input::

    import numpy as np, aggswitch
    c = aggswitch.Client("10.0.10.253", job=7, key=0x5eed, rank=rank, world=4)
    grad = np.ones(1 << 20, dtype=np.float32)
    c.allreduce(grad)                   # in place; op="sum" by default
    h = c.allreduce_async(grad, "max")  # returns at once
    h.wait()

Buffers: any writable C-contiguous buffer (NumPy arrays, ``memoryview``,
``array.array``) of float32, float16, int32 or bool, and CPU torch tensors of
those types and bfloat16. Ops: ``"sum"``, ``"min"`` and ``"max"`` for
numbers, ``"and"`` and ``"or"`` for int32 and bool.

The keyword options are the C++ ``ClientOptions`` (client/client.h), times in
seconds. A failed call raises an :class:`Error` subclass (aggswitch.errors);
bad options raise :class:`InvalidArgumentError`, a ``ValueError``. The GIL is
released while an allreduce runs.
"""

import sys

from aggswitch import _core
from aggswitch._core import FloatMode, Handle, TaskInfo, Transport
from aggswitch.errors import (Error, FailedPreconditionError, IncompleteError,
                              InvalidArgumentError, OutOfRangeError, ResourceExhaustedError,
                              UnavailableError)

__all__ = [
    "Client", "Handle", "Transport", "TaskInfo", "FloatMode", "Error", "InvalidArgumentError",
    "UnavailableError", "IncompleteError", "FailedPreconditionError", "ResourceExhaustedError", "OutOfRangeError",
]

_TORCH_DTYPES = ("float32", "float16", "bfloat16", "int32", "bool")


def _tensor(buffer):
    """(address, count, dtype name) of a CPU torch tensor; None for anything else."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(buffer, torch.Tensor):
        return None
    name = str(buffer.dtype).replace("torch.", "")
    if name not in _TORCH_DTYPES:
        raise InvalidArgumentError(
            f"tensor: {', '.join(_TORCH_DTYPES)} elements expected, got {buffer.dtype}")
    if buffer.device.type != "cpu":
        raise InvalidArgumentError(f"tensor: a CPU tensor expected, got one on {buffer.device}")
    if not buffer.is_contiguous():
        raise InvalidArgumentError("tensor: C-contiguous elements expected")
    return buffer.data_ptr(), buffer.numel(), name


class Client:
    """One rank of one job at one or more switches.

    ``switches``: ``"a.b.c.d[:port]"`` or a list of them (allreduce i goes to
    one of them, the same at every rank). ``job`` (> 0) and ``key``: the job
    as the switch knows it. ``rank`` in ``0..world-1``.
    """

    def __init__(self, switches, job, key, rank, world, **options):
        if isinstance(switches, str):
            switches = [switches]
        self._client = _core.Client(_core.Options(list(switches), job, key, rank, world, **options))

    @classmethod
    def from_options(cls, options: "_core.Options") -> "Client":
        """A client from checked options (``aggswitch._core.Options``, with
        the same arguments as this class)."""
        client = cls.__new__(cls)
        client._client = _core.Client(options)
        return client

    def allreduce(self, buffer, op="sum"):
        """Reduces ``buffer`` over every rank with ``op``, in place; returns it."""
        return self.allreduce_async(buffer, op).wait()

    def allreduce_async(self, buffer, op="sum") -> Handle:
        """Starts the allreduce and returns its :class:`Handle`. The buffer
        belongs to the client until the handle is done; allreduces run in the
        order they were started."""
        tensor = _tensor(buffer)
        if tensor is not None:
            address, count, dtype = tensor
            return self._client.allreduce_ptr(address, count, dtype, op, buffer)
        return self._client.allreduce_async(buffer, op)

    def chunk_elements(self, dtype: str) -> int:
        """Elements of ``dtype`` per datagram with this client's options."""
        return self._client.chunk_elements(dtype)

    @property
    def local_port(self) -> int:
        """The local UDP port the client sends from."""
        return self._client.local_port

    @property
    def transport_description(self) -> str:
        """How datagrams travel, e.g. ``"udp"``."""
        return self._client.transport_description

    @property
    def stats(self) -> dict:
        """The client's counters (ClientStats in client/client.h)."""
        return self._client.stats

    def close(self) -> None:
        """Stops the client: a running allreduce fails, and so does every later call."""
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
