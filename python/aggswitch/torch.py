"""PyTorch through aggswitch, two ways: a torch.distributed backend and a DDP
communication hook.

The backend: importing this module registers ``"aggswitch"``, so a script
changes one word::

    import aggswitch.torch
    dist.init_process_group("aggswitch", rank=rank, world_size=4)  # was "gloo"

Its ``all_reduce`` of one CPU tensor of float32, float16, bfloat16, int32 or
bool with SUM, MIN or MAX (BAND and BOR on bool) goes through the switch;
every other call (broadcast, barrier, all_gather, an all_reduce of float64,
PRODUCT, ...) goes to a Gloo process group created under the same store.

The hook, on any process group (Gloo included)::

    model = DDP(model)
    model.register_comm_hook(aggswitch.torch.hook_state(), aggswitch.torch.allreduce_hook)

Each gradient bucket is summed through the switch and divided by the world
size (DDP's mean), asynchronously: backward goes on while buckets are in
flight.

Both find the switch and the job the same way. Rank 0 of the group draws a
job id and key and puts them in the group's store, where the other ranks read
them, so every group (``dist.new_group`` included) is a job of its own that
registers itself at the switch in-band. The environment (strings, as
``torchrun`` passes them):

``AGGSWITCH_SWITCH``        the switch: ``a.b.c.d[:port]``, several
                            comma-separated (required)
``AGGSWITCH_JOB``,          a fixed job id and key instead of drawn ones
``AGGSWITCH_KEY``           (for a job the operator declared)
``AGGSWITCH_TRANSPORT``     ``udp`` (default) or ``af_xdp``
``AGGSWITCH_INTERFACE``     the interface for ``af_xdp``
``AGGSWITCH_FLOAT_MODE``    ``fixed_point`` (default), ``float``, ``ordered``
``AGGSWITCH_WINDOW``        chunks in flight (default 128)
``AGGSWITCH_MTU``           the path MTU (default 1500)
``AGGSWITCH_TIMEOUT``       seconds without progress before an allreduce
                            fails (default 10)

A bad or missing value raises :class:`aggswitch.InvalidArgumentError` naming
the variable. An allreduce that fails (a rank died, the switch is gone)
raises within ``AGGSWITCH_TIMEOUT`` instead of hanging.
"""

import os
import queue
import secrets
import threading

import torch
import torch.distributed as dist

import aggswitch
from aggswitch import _core
from aggswitch.errors import InvalidArgumentError

__all__ = ["allreduce_hook", "hook_state", "HookState", "client_options"]

_BACKEND = "aggswitch"
_TRANSPORTS = {"udp": _core.Transport.UDP, "af_xdp": _core.Transport.AF_XDP}
_FLOAT_MODES = {
    "fixed_point": _core.FloatMode.FIXED_POINT,
    "float": _core.FloatMode.FLOAT,
    "ordered": _core.FloatMode.ORDERED,
}


def _env_int(name, default, low, high):
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text, 0)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise InvalidArgumentError(f"{name}: an integer in {low}..{high} expected, got {text!r}")
    return value


def _env_choice(name, choices, default):
    text = os.environ.get(name, "") or default
    if text not in choices:
        raise InvalidArgumentError(f"{name}: one of {', '.join(choices)} expected, got {text!r}")
    return choices[text]


def _agree_job(store, rank, prefix):
    """(job, key) for the group: the environment's, or rank 0's draw read
    from the store (get blocks until rank 0 has set it)."""
    job = _env_int("AGGSWITCH_JOB", None, 1, 0xFFFFFFFF)
    key = _env_int("AGGSWITCH_KEY", None, 0, 0xFFFFFFFFFFFFFFFF)
    if job is not None:
        return job, key if key is not None else 0
    name = f"aggswitch/{prefix}/job"
    if rank == 0:
        # Drawn ids stay above 2^24, out of the way of ids an operator picks.
        drawn = "%d:%d" % ((1 << 24) + secrets.randbelow((1 << 32) - (1 << 24)), secrets.randbits(64))
        store.set(name, drawn)
    job, key = (int(x) for x in store.get(name).decode().split(":"))
    return job, key


def client_options(store, rank, world, prefix="pg"):
    """The :class:`aggswitch._core.Options` of one rank of a group: the job
    agreed through ``store`` (under ``prefix``), the rest from the
    environment."""
    switches = [s.strip() for s in os.environ.get("AGGSWITCH_SWITCH", "").split(",") if s.strip()]
    if not switches:
        raise InvalidArgumentError("AGGSWITCH_SWITCH: the switch's address expected (a.b.c.d[:port]), unset")
    options = dict(
        transport=_env_choice("AGGSWITCH_TRANSPORT", _TRANSPORTS, "udp"),
        interface=os.environ.get("AGGSWITCH_INTERFACE", ""),
        float_mode=_env_choice("AGGSWITCH_FLOAT_MODE", _FLOAT_MODES, "fixed_point"),
        window=_env_int("AGGSWITCH_WINDOW", 128, 1, 2048),
        mtu=_env_int("AGGSWITCH_MTU", 1500, 128, 9600),  # the client's kMinMtu..kMaxMtu
    )
    timeout = os.environ.get("AGGSWITCH_TIMEOUT", "")
    if timeout:
        try:
            options["progress_timeout"] = float(timeout)
        except ValueError:
            raise InvalidArgumentError(f"AGGSWITCH_TIMEOUT: seconds expected, got {timeout!r}") from None
    job, key = _agree_job(store, rank, prefix)
    return _core.Options(switches, job, key, rank, world, **options)


def _create_process_group(store, rank, world, timeout):
    from aggswitch import _torch  # the C++ extension, against libtorch

    gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo", store), rank, world, timeout)
    return _torch.new_process_group(rank, world, client_options(store, rank, world), gloo)


def _register():
    if _BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(_BACKEND, _create_process_group)


_register()


class HookState:
    """What :func:`allreduce_hook` needs: the rank's client of the group's
    job, and one thread that finishes the buckets' futures in order."""

    def __init__(self, client, world):
        self.client = client
        self.world = world
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._finish, name="aggswitch-hook", daemon=True)
        self._thread.start()

    def start(self, tensor):
        """Starts the sum of ``tensor`` through the switch; returns a
        torch Future of the mean, set once the sum is in. A failure is the
        future's error (DDP raises it from backward)."""
        future = torch.futures.Future()
        try:
            handle = self.client.allreduce_async(tensor, "sum")
        except aggswitch.Error as error:
            future.set_exception(error)
        else:
            self._queue.put((handle, tensor, future))
        # set_exception stores the exception as the future's value, which
        # DDP's C++ side would try to read as tensors; the callback's raise
        # makes it an error of the future DDP waits on.
        return future.then(_value)

    def _finish(self):
        while True:
            handle, tensor, future = self._queue.get()
            try:
                handle.wait()  # without the GIL
                tensor.div_(self.world)
                future.set_result(tensor)
            except Exception as error:  # handed to the training loop, which raises it
                future.set_exception(error)


def _value(future):
    return future.value()


_hook_states = 0


def hook_state(process_group=None):
    """The state for :func:`allreduce_hook`: a client of a job of its own for
    ``process_group`` (the default group when None), agreed through the
    default store. Every rank must call it, in the same order."""
    global _hook_states
    group = process_group if process_group is not None else dist.group.WORLD
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    store = dist.distributed_c10d._get_default_store()
    _hook_states += 1
    options = client_options(store, rank, world, prefix=f"hook{_hook_states}")
    return HookState(aggswitch.Client.from_options(options), world)


def allreduce_hook(state, bucket):
    """A DDP communication hook: the bucket's gradients summed through the
    switch and divided by the world size. ``state`` comes from
    :func:`hook_state`."""
    return state.start(bucket.buffer())
