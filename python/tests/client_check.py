"""One rank of the Python package's system test (tests/system/python_netns_test.sh).

Every rank runs this against the same switch with the same arguments but its
rank. Each case's inputs are a function of (case, rank), so every rank knows
every rank's inputs and checks the switch's answer against NumPy's reduction
of them, element for element (the values are chosen so that fixed point and
float16 are exact). Prints one line per group of checks, and exits 1 on the
first failure.
"""

import argparse
import array
import sys
import threading
import time

import numpy as np

import torch

import aggswitch

N = 5000  # elements: several datagrams of every dtype

NUMPY_REDUCE = {"sum": np.add, "min": np.minimum, "max": np.maximum,
                "and": np.bitwise_and, "or": np.bitwise_or}
CASES = [("float32", op) for op in ("sum", "min", "max")] + \
    [("float16", op) for op in ("sum", "min", "max")] + \
    [("int32", op) for op in ("sum", "min", "max", "and", "or")] + \
    [("bool", op) for op in ("and", "or")]


def inputs(case, rank, dtype):
    rng = np.random.default_rng(1000 * case + rank)
    if dtype == "bool":
        # Mostly true for and, mostly false for or: both answers mix.
        return rng.random(N) < (0.9 if case % 2 == 0 else 0.1)
    if dtype == "int32":
        return rng.integers(-(1 << 20), 1 << 20, N, dtype=np.int32)
    # Multiples of 1/8 below 128: exact in float16, float32 and fixed point.
    return (rng.integers(-1023, 1024, N) / 8).astype(dtype)


def expected(case, world, dtype, op):
    parts = [inputs(case, r, dtype) for r in range(world)]
    if dtype == "bool":
        reduce = np.logical_and if op == "and" else np.logical_or
    else:
        reduce = NUMPY_REDUCE[op]
    acc = parts[0].astype(np.float32) if dtype == "float16" else parts[0]
    for p in parts[1:]:
        acc = reduce(acc, p.astype(np.float32) if dtype == "float16" else p)
    return acc.astype(dtype)


def fail(what):
    print(f"FAIL: {what}")
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switch", required=True)
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--key", type=lambda s: int(s, 0), required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    a = ap.parse_args()

    # Bad options: ValueError (InvalidArgumentError) with the C++ message.
    for kwargs, message in (({"world": 0}, "world: 1..1024 expected, got 0"),
                            ({"rank": 9}, f"rank: 0..{a.world - 1} expected (world {a.world}), got 9")):
        opts = {"job": a.job, "key": a.key, "rank": a.rank, "world": a.world, **kwargs}
        try:
            aggswitch.Client(a.switch, **opts)
            fail(f"{kwargs} accepted")
        except ValueError as e:
            if not isinstance(e, aggswitch.InvalidArgumentError) or str(e) != message \
                    or e.code != "INVALID_ARGUMENT":
                fail(f"{kwargs}: {type(e).__name__} {e!r}, expected {message!r}")
    try:
        aggswitch.Client("10.0.0.300", job=a.job, key=a.key, rank=a.rank, world=a.world)
        fail("a bad switch address accepted")
    except aggswitch.InvalidArgumentError as e:
        if "10.0.0.300" not in str(e):
            fail(f"bad switch address: {e}")
    # Every C++ status code has its class, and an unknown one still an Error.
    for code, cls in (("INCOMPLETE", aggswitch.IncompleteError),
                      ("UNAVAILABLE", aggswitch.UnavailableError),
                      ("OUT_OF_RANGE", OverflowError), ("INTERNAL", aggswitch.Error)):
        e = aggswitch.errors.from_status(code, "m")
        if not isinstance(e, cls) or e.code != code or str(e) != "m":
            fail(f"from_status({code!r}): {type(e).__name__} {e.code}")
    print(f"rank {a.rank}: bad options raise ValueError with the C++ messages")

    c = aggswitch.Client(a.switch, job=a.job, key=a.key, rank=a.rank, world=a.world,
                         progress_timeout=20.0)
    # Refused before anything is sent: every rank refuses the same calls.
    refusals = [(lambda: c.allreduce(np.zeros(4, np.float32), "prod"), "op: sum, min, max"),
                (lambda: c.allreduce(np.zeros(4, np.bool_), "sum"), "not defined for bool"),
                (lambda: c.allreduce(np.zeros(8, np.float32)[::2]), "C-contiguous"),
                (lambda: c.allreduce(np.zeros(4, np.float64)), "format \"d\"")]
    for call, words in refusals:
        try:
            call()
            fail(f"refusal {words!r}: accepted")
        except aggswitch.InvalidArgumentError as e:
            if words not in str(e):
                fail(f"refusal {words!r}: {e}")
    try:
        c.allreduce(b"\0\0\0\0")
        fail("a read-only buffer accepted")
    except BufferError:
        pass
    print(f"rank {a.rank}: bad arguments raise InvalidArgumentError, nothing sent")

    for case, (dtype, op) in enumerate(CASES):
        data = inputs(case, a.rank, dtype).copy()
        out = c.allreduce(data, op)
        if out is not data:
            fail(f"{dtype} {op}: allreduce returned another object")
        want = expected(case, a.world, dtype, op)
        if not np.array_equal(data, want):
            bad = np.flatnonzero(data != want)
            fail(f"{dtype} {op}: {bad.size} elements differ, first {bad[0]}: "
                 f"{data[bad[0]]} != {want[bad[0]]}")
    print(f"rank {a.rank}: {len(CASES)} dtype/op cases exact against NumPy")

    # Other buffers: a memoryview of an array.array, in place.
    ints = array.array("i", range(a.rank, a.rank + 1000))
    c.allreduce(memoryview(ints), "max")
    if list(ints) != list(range(a.world - 1, a.world - 1 + 1000)):
        fail("array.array max")
    print(f"rank {a.rank}: a memoryview of an array.array, in place")

    # Async: three at once, waited in reverse order; done() after wait.
    arrays = [np.full(20000, a.rank + i, np.int32) for i in range(3)]
    handles = [c.allreduce_async(x, "sum") for x in arrays]
    for i in reversed(range(3)):
        handles[i].wait()
        if not handles[i].done():
            fail("done() false after wait()")
        want = sum(r + i for r in range(a.world))
        if not (arrays[i] == want).all():
            fail(f"async {i}: {arrays[i][:4]} != {want}")
    print(f"rank {a.rank}: three async allreduces, waited in reverse order")

    # The GIL is released while waiting: another thread runs meanwhile.
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.0005)

    big = np.ones(1 << 20, np.float32)
    h = c.allreduce_async(big)
    t = threading.Thread(target=tick)
    t.start()
    time.sleep(0.005)  # the thread is running
    start = time.monotonic()
    h.wait()
    end = time.monotonic()
    stop.set()
    t.join()
    during = [x for x in ticks if start < x < end]
    if not (big == a.world).all():
        fail("the 4 MiB sum")
    if end - start > 0.01 and not during:
        fail(f"no other thread ran during a {end - start:.3f} s wait")
    print(f"rank {a.rank}: another thread ran {len(during)} times during a "
          f"{(end - start) * 1000:.1f} ms wait")

    # CPU torch tensors, bfloat16 among them: the same cases, in place. The
    # bfloat16 inputs are multiples of 1/8 in -2..2, whose sums over the
    # ranks fit its 8 significant bits.
    def torch_inputs(case, rank, dtype):
        if dtype != "bfloat16":
            return inputs(case, rank, dtype)
        return np.round(inputs(case, rank, "float32") / 8) / 8

    tcases = [("bfloat16", op) for op in ("sum", "min", "max")] + CASES
    for case, (dtype, op) in enumerate(tcases, start=100):
        tensor = torch.from_numpy(torch_inputs(case, a.rank, dtype).copy()).to(getattr(torch, dtype))
        out = c.allreduce(tensor, op)
        if out is not tensor:
            fail(f"tensor {dtype} {op}: allreduce returned another object")
        parts = [torch_inputs(case, r, dtype) for r in range(a.world)]
        if dtype == "bool":
            want = np.logical_and.reduce(parts) if op == "and" else np.logical_or.reduce(parts)
        else:
            want = NUMPY_REDUCE[op].reduce([p.astype(np.float64) if dtype != "int32" else p for p in parts])
        want = torch.from_numpy(np.ascontiguousarray(want)).to(tensor.dtype)
        if not torch.equal(tensor, want):
            bad = torch.nonzero(tensor != want).flatten()
            fail(f"tensor {dtype} {op}: {bad.numel()} elements differ, first {int(bad[0])}: "
                 f"{tensor[bad[0]].item()} != {want[bad[0]].item()}")
    for call, words in [(lambda: c.allreduce(torch.zeros(8)[::2]), "C-contiguous"),
                        (lambda: c.allreduce(torch.zeros(4, dtype=torch.float64)), "float64")]:
        try:
            call()
            fail(f"tensor refusal {words!r}: accepted")
        except aggswitch.InvalidArgumentError as e:
            if words not in str(e):
                fail(f"tensor refusal {words!r}: {e}")
    torch_cases = len(tcases)
    print(f"rank {a.rank}: {torch_cases} torch tensor cases (bfloat16 too) exact, in place")

    stats = c.stats
    if stats["allreduces"] != len(CASES) + 5 + torch_cases or stats["chunks"] == 0:
        fail(f"stats: {stats}")
    c.close()
    try:
        c.allreduce(np.zeros(4, np.float32))
        fail("a closed client accepted an allreduce")
    except aggswitch.FailedPreconditionError:
        pass
    print(f"rank {a.rank}: stats count {stats['allreduces']} allreduces; a closed client refuses")


if __name__ == "__main__":
    main()
