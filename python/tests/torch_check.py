"""One rank of the PyTorch backend's collectives check (tests/system/torch_netns_test.sh).

Every rank runs this on the "aggswitch" process group with the same
arguments but its rank. Inputs are a function of (case, rank), so each rank
checks every answer against the reduction of all ranks' inputs:
  - all_reduce of every dtype the switch takes (float32, float16, bfloat16,
    int32, bool) with SUM, MIN and MAX (BAND and BOR on bool), in place, and
    of a strided view (written back through a copy); async (async_op=True)
    with wait() and the Work's future;
  - what goes to the Gloo group: all_reduce of float64 and with PRODUCT,
    broadcast, all_gather and barrier;
  - a dist.new_group of two ranks is a job of its own.
Prints one line per group of checks and the job ids it used (rank 0), and
exits 1 on the first failure.
"""

import argparse
import datetime
import sys

import torch
import torch.distributed as dist

import aggswitch.torch  # noqa: F401 (registers the backend)

N = 3000  # elements: several datagrams of every dtype


def fail(what):
    print(f"FAIL: {what}", flush=True)
    sys.exit(1)


def inputs(case, rank, dtype):
    g = torch.Generator().manual_seed(1000 * case + rank)
    if dtype == torch.bool:
        return torch.rand(N, generator=g) < (0.9 if case % 2 == 0 else 0.1)
    if dtype == torch.int32:
        return torch.randint(-(1 << 20), 1 << 20, (N,), generator=g, dtype=torch.int32)
    # Multiples of 1/8 in -2..2: exact in every float type, and so are their
    # sums over a few ranks.
    return (torch.randint(-16, 17, (N,), generator=g).to(torch.float64) / 8).to(dtype)


def expected(case, world, dtype, op):
    parts = [inputs(case, r, dtype).to(torch.float64 if dtype.is_floating_point else dtype)
             for r in range(world)]
    acc = parts[0].clone()
    for p in parts[1:]:
        if op in (dist.ReduceOp.SUM,):
            acc = acc + p if dtype != torch.bool else acc | p
        elif op in (dist.ReduceOp.MIN, dist.ReduceOp.BAND):
            acc = torch.minimum(acc, p) if dtype != torch.bool else acc & p
        elif op in (dist.ReduceOp.MAX, dist.ReduceOp.BOR):
            acc = torch.maximum(acc, p) if dtype != torch.bool else acc | p
        elif op == dist.ReduceOp.PRODUCT:
            acc = acc * p
    return acc.to(dtype)


def check_equal(what, got, want):
    if not torch.equal(got, want):
        bad = torch.nonzero(got != want).flatten()
        fail(f"{what}: {bad.numel()} elements differ, first {int(bad[0])}: "
             f"{got[bad[0]].item()} != {want[bad[0]].item()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--init", required=True)
    a = ap.parse_args()
    dist.init_process_group("aggswitch", init_method=a.init, rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=60))
    if dist.get_backend() != "aggswitch":
        fail(f"backend {dist.get_backend()}")

    ops = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
           "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR}
    cases = [(t, o) for t in (torch.float32, torch.float16, torch.bfloat16, torch.int32)
             for o in ("sum", "min", "max")] + [(torch.bool, o) for o in ("min", "max", "band", "bor")]
    for case, (dtype, name) in enumerate(cases):
        t = inputs(case, a.rank, dtype)
        dist.all_reduce(t, op=ops[name])
        check_equal(f"all_reduce {dtype} {name}", t, expected(case, a.world, dtype, ops[name]))
    print(f"rank {a.rank}: all_reduce of {len(cases)} dtype/op cases exact", flush=True)

    # A strided view goes through a contiguous copy and comes back.
    case = 100
    base = torch.zeros(2 * N, dtype=torch.float32)
    view = base[::2]
    view.copy_(inputs(case, a.rank, torch.float32))
    dist.all_reduce(view)
    check_equal("all_reduce of a strided view", view, expected(case, a.world, torch.float32, dist.ReduceOp.SUM))
    if base[1::2].any():
        fail("all_reduce of a strided view wrote between its elements")
    # Async: three at once, waited in reverse order, one through its future.
    ts = [inputs(200 + i, a.rank, torch.int32) for i in range(3)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futures_value = works[0].get_future().wait()
    for i in reversed(range(3)):
        works[i].wait()
        if not works[i].is_completed():
            fail("is_completed() false after wait()")
        check_equal(f"async all_reduce {i}", ts[i], expected(200 + i, a.world, torch.int32, dist.ReduceOp.SUM))
    if not torch.equal(futures_value[0], ts[0]):
        fail("the Work's future holds another tensor")
    print(f"rank {a.rank}: a strided view, three async all_reduces and a future", flush=True)

    # Gloo's part: float64, PRODUCT, broadcast, all_gather, barrier.
    t = inputs(300, a.rank, torch.float64)
    dist.all_reduce(t)
    check_equal("all_reduce float64 (Gloo)", t, expected(300, a.world, torch.float64, dist.ReduceOp.SUM))
    t = inputs(301, a.rank, torch.int32) % 3 + 1
    want = torch.ones(N, dtype=torch.int32)
    for r in range(a.world):
        want *= inputs(301, r, torch.int32) % 3 + 1
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    check_equal("all_reduce PRODUCT (Gloo)", t, want)
    t = inputs(302, a.rank, torch.float32)
    dist.broadcast(t, src=1)
    check_equal("broadcast", t, inputs(302, 1, torch.float32))
    gathered = [torch.empty(N, dtype=torch.float32) for _ in range(a.world)]
    dist.all_gather(gathered, inputs(303, a.rank, torch.float32))
    for r in range(a.world):
        check_equal(f"all_gather from rank {r}", gathered[r], inputs(303, r, torch.float32))
    dist.barrier()
    print(f"rank {a.rank}: float64 and PRODUCT all_reduce, broadcast, all_gather, barrier (Gloo)",
          flush=True)

    # A group of ranks 0 and 1: its own job.
    group = dist.new_group([0, 1])
    if a.rank < 2:
        t = inputs(400, a.rank, torch.float32)
        dist.all_reduce(t, group=group)
        want = inputs(400, 0, torch.float32) + inputs(400, 1, torch.float32)
        check_equal("all_reduce in a group of two", t, want)
        print(f"rank {a.rank}: a group of two ranks allreduced apart", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
