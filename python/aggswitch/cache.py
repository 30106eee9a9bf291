"""Training data out of the aggswitch data cache (docs/cache.md).

The cache's daemons (agg-cached) hold a dataset in the cluster's memory; a
:class:`Loader` reads it by RDMA (UCX) straight into its buffer, from this
node's own copy where there is one. Its config file's ``loader:`` section
says where the records are, which dataset and job, and what a request is::

    loader:
      records: etcd://10.0.0.100:2379
      dataset: imagenet-train
      job: resnet50
      node: n2                     # this node's cache name, for the local path
      store: http://10.0.0.9:8000/imagenet-train   # on a miss
      request: {amount: 64MiB, component: cpu}

Requests follow the file: change ``request.amount`` and the next request
has the new size.

In a PyTorch script, one line swaps the dataset::

    dataset = aggswitch.cache.CacheDataset("loader.yaml", transform=decode)
    loader = torch.utils.data.DataLoader(dataset, batch_size=64, num_workers=4)

:class:`CacheDataset` is map-style (one item per index, each worker process
opens its own Loader); :class:`CacheBatches` is iterable and yields the
config's requests whole, as uint8 tensors.

Errors raise aggswitch.Error's subclasses; a ``gpu`` component on a host
whose UCX has no CUDA raises FailedPreconditionError ("unsupported on this
host").
"""

import os

from aggswitch import _cache
from aggswitch.errors import FailedPreconditionError

__all__ = ["Loader", "CacheDataset", "CacheBatches"]


# The process that started UCX, if any. UCX does not survive a fork: its
# service thread stays behind in the parent, and a loader opened in a forked
# child would hang. So a child of such a process refuses, saying why.
_UCX_PID = None


class Loader:
    """One process's reader of the cache (cache/loader.h). Not thread-safe:
    one per thread or process."""

    def __init__(self, config):
        global _UCX_PID
        if _UCX_PID is not None and _UCX_PID != os.getpid():
            raise FailedPreconditionError(
                "aggswitch.cache: this process was forked from one that had opened a Loader, "
                "and UCX does not survive a fork; give the DataLoader "
                "multiprocessing_context=\"spawn\" (or \"forkserver\"), or read no item "
                "in the parent before its workers start")
        self._config = os.fspath(config)
        self._impl = _cache.Loader(self._config)
        _UCX_PID = os.getpid()

    def next(self):
        """The next request: ``(data, items)``. ``data`` is a read-only
        memoryview of the request's bytes, which the next request
        overwrites (copy what must outlive it);
        ``items`` lists ``(name, offset, length, source)``, source being
        ``local``, ``owner``, ``replica`` or ``store``."""
        data, items, _ = self._impl.next()
        return data, items

    def skip(self):
        """Passes over the next request without reading it; the number of
        its items."""
        return self._impl.skip()

    def read(self, index):
        """Item ``index`` as bytes."""
        return self._impl.read(index)

    def read_into(self, index, buffer):
        """Item ``index`` into ``buffer`` (writable, at least its length)."""
        self._impl.read_into(index, buffer)

    def set_request(self, amount, component="cpu"):
        """Bytes per request and the destination (``cpu`` or ``gpu``) from now on."""
        self._impl.set_request(int(amount), component)

    def seek(self, index):
        """The next request starts at item ``index``."""
        self._impl.seek(index)

    def __len__(self):
        return len(self._impl)

    def name(self, index):
        return self._impl.name(index)

    def length(self, index):
        return self._impl.length(index)

    @property
    def amount(self):
        return self._impl.amount

    @property
    def component(self):
        return self._impl.component

    @property
    def transports(self):
        """The UCX transports of the connections so far, e.g. ``tcp/eth0``."""
        return self._impl.transports

    def stats(self):
        """Items by source, misses, stale records, failed holders, ..."""
        return self._impl.stats()


try:
    import torch
    from torch.utils.data import Dataset, IterableDataset
except ImportError:  # the Loader works without PyTorch
    torch = None
    Dataset = IterableDataset = object


# Loaders a forked process inherited: never destroyed there, since UCX's
# state does not survive a fork (the child opens its own).
_INHERITED = []


class _PerProcess:
    """A Loader opened lazily in each process (DataLoader workers fork)."""

    def __init__(self, config):
        self._config = os.fspath(config)
        self._pid = None
        self._loader = None

    def get(self):
        if self._loader is None or self._pid != os.getpid():
            if self._loader is not None:
                _INHERITED.append(self._loader)
            self._loader = Loader(self._config)
            self._pid = os.getpid()
        return self._loader

    def __getstate__(self):
        return {"_config": self._config, "_pid": None, "_loader": None}


class CacheDataset(Dataset):
    """A map-style dataset over the cache: item ``i`` of the dataset's list.

    ``transform(raw)`` turns an item's bytes into a sample; without one, a
    sample is the item's bytes as a uint8 tensor. Each process (each
    DataLoader worker) opens its own Loader on its first item. Creating the
    dataset opens none, so forked workers work as long as the parent reads
    no item itself; otherwise give the DataLoader
    ``multiprocessing_context="spawn"``."""

    def __init__(self, config, transform=None):
        if torch is None:
            raise ImportError("aggswitch.cache.CacheDataset needs PyTorch")
        self._loaders = _PerProcess(config)
        items = _cache.list_items(os.fspath(config))
        self._names = [name for name, _ in items]
        self._lengths = [length for _, length in items]
        self.transform = transform

    def __len__(self):
        return len(self._names)

    @property
    def names(self):
        return list(self._names)

    def __getitem__(self, index):
        if index < 0:
            index += len(self._names)
        if not 0 <= index < len(self._names):
            raise IndexError(f"index {index} of a dataset of {len(self._names)}")
        raw = bytearray(self._lengths[index])
        self._loaders.get().read_into(index, raw)
        if self.transform is not None:
            return self.transform(bytes(raw))
        return torch.frombuffer(raw, dtype=torch.uint8)


class CacheBatches(IterableDataset):
    """The config's requests, one per step: yields ``(tensor, items)``, the
    request's bytes as a uint8 tensor (a copy) and its item list. One pass
    over the dataset per iteration; with DataLoader workers, each worker
    takes every n-th request."""

    def __init__(self, config):
        if torch is None:
            raise ImportError("aggswitch.cache.CacheBatches needs PyTorch")
        self._loaders = _PerProcess(config)

    def __iter__(self):
        loader = self._loaders.get()
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        loader.seek(0)
        seen, request = 0, 0
        while seen < len(loader):
            if request % workers == worker:
                data, items = loader.next()
                seen += len(items)
                yield torch.frombuffer(bytearray(data), dtype=torch.uint8), items
            else:  # another worker's: passed over unread
                seen += loader.skip()
            request += 1
