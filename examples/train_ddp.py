#!/usr/bin/python3
"""Data-parallel training with PyTorch DDP, on Gloo or through aggswitch.

A small MLP learns a fixed random linear map from synthetic data; every rank
draws its own batches, DDP averages the gradients. Three ways to average them:

    --backend gloo                 Gloo's ring (the baseline)
    --backend aggswitch            the aggswitch process group: DDP's
                                   all_reduce goes through the switch
    --backend gloo --hook          Gloo for everything else, the gradients
                                   through aggswitch.torch.allreduce_hook

One process per rank. The rank, world size and rendezvous come from the flags
or from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT);
the switch from AGGSWITCH_SWITCH (aggswitch.torch documents the rest):

    AGGSWITCH_SWITCH=10.0.10.253 torchrun --nproc_per_node 4 \\
        examples/train_ddp.py --backend aggswitch

Each step prints one JSON line (with --log, to that file): the step, the
rank's loss, the global mean loss and a digest of the model's parameters
after the step (equal on every rank when the averaged gradients are
bit-identical), and the step's time.
"""

import argparse
import datetime
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["gloo", "aggswitch"], default="gloo")
    p.add_argument("--hook", action="store_true", help="average the gradients with aggswitch.torch.allreduce_hook")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64, help="samples per rank and step")
    p.add_argument("--width", type=int, default=256, help="the MLP's hidden width")
    p.add_argument("--layers", type=int, default=3, help="hidden layers")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--bucket-mb", type=float, default=1.0, help="DDP's bucket_cap_mb")
    p.add_argument("--rank", type=int, default=int(os.environ.get("RANK", "0")))
    p.add_argument("--world", type=int, default=int(os.environ.get("WORLD_SIZE", "1")))
    p.add_argument("--init", default=None,
                   help="tcp://ADDR:PORT (default: env:// from MASTER_ADDR and MASTER_PORT)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds the process group waits")
    p.add_argument("--log", default=None, help="write the JSON lines here instead of stdout")
    return p.parse_args()


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    args = parse_args()
    if args.backend == "aggswitch" or args.hook:
        import aggswitch.torch  # registers the "aggswitch" backend
    dist.init_process_group(args.backend, init_method=args.init or "env://", rank=args.rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=args.timeout))
    torch.manual_seed(0)  # the same model and target everywhere
    dims = 64
    target = torch.randn(dims, 8)
    layers, width = [], dims
    for _ in range(args.layers):
        layers += [nn.Linear(width, args.width), nn.Tanh()]
        width = args.width
    model = DDP(nn.Sequential(*layers, nn.Linear(width, 8)), bucket_cap_mb=args.bucket_mb)
    if args.hook:
        model.register_comm_hook(aggswitch.torch.hook_state(), aggswitch.torch.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    data = torch.Generator().manual_seed(1000 + args.rank)  # each rank its own batches

    out = open(args.log, "w") if args.log else sys.stdout
    for step in range(args.steps):
        x = torch.randn(args.batch, dims, generator=data)
        y = x @ target
        start = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        seconds = time.perf_counter() - start
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= args.world
        print(json.dumps({"step": step, "loss": loss.item(), "mean_loss": mean.item(),
                          "params": digest(model.module), "seconds": seconds}), file=out, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
