"""A plain mpi4py program: allreduces of NumPy arrays and of Python objects,
with a digest of every result printed by rank 0. It knows nothing of
aggswitch: tests/system/mpi_netns_test.sh runs it under mpirun without and
with libaggswitch_mpi.so preloaded, and the two outputs must be equal.

    mpirun -np 4 /usr/bin/python3 allreduce_check.py

comm.Allreduce of float32, int32 and bool arrays (MPI_FLOAT, MPI_INT,
MPI_C_BOOL) with every op the switch takes, in place and not, an
Iallreduce waited with Wait, and what falls through to MPI: float64,
MPI_PROD and comm.allreduce of a Python object (pickled). The float
inputs are multiples of 1/64 below 16 in magnitude: their sums are exact
in float32 in any order, and in the switch's fixed point.
"""
import hashlib

import numpy as np
from mpi4py import MPI

COUNT = 3000

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()
i = np.arange(COUNT)


def report(name, result):
    digest = hashlib.sha256(result.tobytes()).hexdigest()[:16]
    digests = comm.gather(digest, root=0)
    if rank == 0:
        agree = "yes" if len(set(digests)) == 1 else "NO"
        print(f"{name:<34} {digest}  {result[:3].tolist()}  ranks agree: {agree}", flush=True)


def inputs(dtype, op):
    if dtype == np.float32:
        if op == MPI.PROD:
            return (1 + ((i + rank) % 3) / 4).astype(np.float32)
        return (((i * 7 + rank * 13) % 2001 - 1000) / 64).astype(np.float32)
    if dtype == np.int32:
        if op in (MPI.LAND, MPI.LOR):
            return ((i + rank) % 5).astype(np.int32)  # logical, not bitwise
        return ((i * 31 + rank * 17) % 20001 - 10000).astype(np.int32)
    if dtype == np.bool_:
        if op == MPI.LAND:
            return (i * 3 + rank) % 7 != 0
        return (i * 5 + rank) % 9 == 0
    return (((i * 5 + rank * 11) % 1001 - 500) / 8).astype(dtype)


CASES = [
    ("float32 sum", np.float32, MPI.SUM),
    ("float32 min", np.float32, MPI.MIN),
    ("float32 max", np.float32, MPI.MAX),
    ("int32 sum", np.int32, MPI.SUM),
    ("int32 min", np.int32, MPI.MIN),
    ("int32 max", np.int32, MPI.MAX),
    ("int32 land", np.int32, MPI.LAND),
    ("int32 lor", np.int32, MPI.LOR),
    ("bool land", np.bool_, MPI.LAND),
    ("bool lor", np.bool_, MPI.LOR),
    ("float64 sum (MPI's own)", np.float64, MPI.SUM),
    ("float32 prod (MPI's own)", np.float32, MPI.PROD),
]

if rank == 0:
    print(f"allreduce_check.py: {size} ranks, {COUNT} elements per case", flush=True)
for name, dtype, op in CASES:
    send = inputs(dtype, op)
    recv = np.empty_like(send)
    comm.Allreduce(send, recv, op=op)
    report("Allreduce " + name, recv)
    buf = send.copy()
    comm.Allreduce(MPI.IN_PLACE, buf, op=op)
    report("Allreduce in place " + name, buf)

buf = inputs(np.float32, MPI.SUM)
request = comm.Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
request.Wait()
report("Iallreduce+Wait float32 sum", buf)

total = comm.allreduce(rank + 1, op=MPI.SUM)
report("allreduce of a Python int", np.array([total, 0, 0]))
