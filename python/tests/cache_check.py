"""The Python side of the data cache's system test (tests/system/cache_netns_test.sh).

Loads the dataset through aggswitch.cache as a training script would, and
checks every item against the source copy in --verify-against:
  1. Loader.next() over one pass, set_request changing the next request,
     skip() passing over a request, and a request's bytes outliving a larger
     request and the Loader;
  2. CacheDataset under a torch DataLoader with two worker processes;
  3. CacheBatches, the config's requests as tensors;
  4. the gpu component refused as unsupported on this host.
Prints one line per check and exits 1 on the first failure.
"""

import argparse
import gc
import os
import sys

import torch

import aggswitch
import aggswitch.cache


def fail(message):
    print("FAIL", message)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--verify-against", required=True)
    args = parser.parse_args()

    def source(name):
        with open(os.path.join(args.verify_against, name), "rb") as f:
            return f.read()

    loader = aggswitch.cache.Loader(args.config)
    n = len(loader)
    seen = 0
    sizes = []
    while seen < n:
        data, items = loader.next()
        sizes.append(len(data))
        for name, offset, length, where in items:
            if bytes(data[offset:offset + length]) != source(name):
                fail(f"Loader.next: {name} differs from the source ({where})")
        seen += len(items)
    stats = loader.stats()
    if stats["store"] != 0 or stats["owner"] + stats["replica"] + stats["local"] != n:
        fail(f"Loader.next: items by source {stats}")
    print(f"ok Loader.next: {n} items in {len(sizes)} requests, byte-identical, "
          f"over {loader.transports}: {stats}")

    loader.seek(0)
    kept = loader.next()  # its buffer is too small for the next request, which maps a new one
    loader.set_request(4 * loader.amount, "cpu")
    data, items = loader.next()
    if len(data) <= max(sizes[:-1]):
        fail(f"set_request: a request of {len(data)} bytes after asking for {loader.amount}")
    print(f"ok set_request: the next request has {len(items)} items, {len(data)} bytes")

    # A larger request mapped a new buffer: the first request's view still
    # reads the first request's bytes, and a view outlives its Loader.
    def intact(view, items):
        return all(bytes(view[o:o + l]) == source(name) for name, o, l, _ in items)
    if not intact(*kept):
        fail("a request's memoryview changed or went away after a larger request")
    other = aggswitch.cache.Loader(args.config)
    view, view_items = other.next()
    del other
    gc.collect()
    if not intact(view, view_items):
        fail("a request's memoryview does not outlive its Loader")
    print("ok a request's memoryview outlives a larger request and its Loader")

    loader.seek(0)
    loader.set_request(sizes[0], "cpu")
    before = loader.stats()
    passed = loader.skip()
    _, items = loader.next()
    after = loader.stats()
    if passed < 1 or items[0][0] != loader.name(passed) or after["items"] - before["items"] != len(items):
        fail(f"skip: passed {passed} items, then read from {items[0][0]}; items read {before['items']} -> {after['items']}")
    print(f"ok skip: passed over {passed} items unread, the next request starts at item {passed}")

    dataset = aggswitch.cache.CacheDataset(args.config)
    if len(dataset) != n:
        fail(f"CacheDataset: {len(dataset)} items, expected {n}")
    names = dataset.names
    total = sum(os.path.getsize(os.path.join(args.verify_against, x)) for x in names)
    # This process has UCX open (the Loader above): forked workers must refuse, not hang.
    try:
        sum(t.numel() for t in torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=1))
        fail("a forked DataLoader worker read from the cache after its parent had opened UCX")
    except Exception as e:  # the worker's exception, re-raised by the DataLoader
        if "multiprocessing_context" not in str(e):
            fail(f"a forked worker failed for another reason: {e}")
    print("ok a forked worker of a process with UCX open refuses, naming multiprocessing_context")
    worker_bytes = 0
    for index, sample in enumerate(torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=2, multiprocessing_context="spawn")):
        if sample.numpy().tobytes() != source(names[index]):
            fail(f"CacheDataset[{index}] from a spawned worker differs from the source")
        worker_bytes += sample.numel()
    if worker_bytes != total:
        fail(f"CacheDataset under DataLoader(num_workers=2): {worker_bytes} bytes, expected {total}")
    count = 0
    for index in range(n):
        sample = dataset[index]
        if sample.dtype != torch.uint8 or sample.numpy().tobytes() != source(names[index]):
            fail(f"CacheDataset[{index}] ({names[index]}) differs from the source")
        count += 1
    print(f"ok CacheDataset: {count} items byte-identical; a DataLoader with 2 spawned "
          f"workers read {worker_bytes} bytes, byte-identical")

    got = 0
    for tensor, items in aggswitch.cache.CacheBatches(args.config):
        for name, offset, length, _ in items:
            if tensor[offset:offset + length].numpy().tobytes() != source(name):
                fail(f"CacheBatches: {name} differs from the source")
        got += len(items)
    if got != n:
        fail(f"CacheBatches: {got} items, expected {n}")
    print(f"ok CacheBatches: {got} items in the config's requests")

    loader.set_request(loader.amount, "gpu")
    try:
        loader.next()
        fail("the gpu component was not refused")
    except aggswitch.FailedPreconditionError as e:
        if "unsupported on this host" not in str(e):
            fail(f"gpu refused with another message: {e}")
        print(f"ok gpu: {e}")


if __name__ == "__main__":
    main()
