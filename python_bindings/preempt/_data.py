"""Resumable data order: the first batch after a resume is the next one the trainer had not seen.

`ResumableSampler` is a (distributed) sampler whose order is a pure function of
(seed, epoch, dataset size, num_replicas, rank), so its state is a few numbers. Its position is
where iteration *starts*; it does not know what a DataLoader prefetched.

`ResumableLoader` wraps a `torch.utils.data.DataLoader` over such a sampler and counts the batches
it has *handed to the trainer* (not what workers prefetched), so `num_workers > 0` resumes
exactly. Track the loader (`rt.track("data", loader)`), not its sampler.

Randomness: the loader's workers are seeded from a generator derived from (seed, epoch, position),
never from the global torch RNG, so creating an iterator does not shift the trainer's random stream.
A dataset that draws random numbers inside workers should derive them from the sample index to be
exact across a resume (worker assignment restarts at the resume point).
"""

import weakref

import torch
import torch.distributed as dist

from . import _C


def _dist_default(num_replicas, rank):
    if num_replicas is None:
        num_replicas = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if rank is None:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise _C.InvalidArgumentError(f"ResumableSampler: rank {rank} is outside [0, {num_replicas})")
    return num_replicas, rank


class ResumableSampler(torch.utils.data.Sampler):
    """Shuffled (or sequential) sampler over `len(dataset)` indices, split across replicas like
    `DistributedSampler` (padded by repetition unless `drop_last`). Iteration starts at `index`."""

    def __init__(self, dataset, *, shuffle=True, seed=0, num_replicas=None, rank=None, drop_last=False):
        self.size = dataset if isinstance(dataset, int) else len(dataset)
        if self.size < 0:
            raise _C.InvalidArgumentError("ResumableSampler: negative dataset size")
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.num_replicas, self.rank = _dist_default(num_replicas, rank)
        if drop_last:
            self.per_rank = self.size // self.num_replicas
        else:
            self.per_rank = -(-self.size // self.num_replicas)
        self.epoch = 0
        self.index = 0  # position within this rank's share of the current epoch

    def set_epoch(self, epoch):
        self.epoch, self.index = int(epoch), 0

    def order(self):
        """This rank's indices for the current epoch."""
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            perm = torch.randperm(self.size, generator=g)
        else:
            perm = torch.arange(self.size)
        total = self.per_rank * self.num_replicas
        if total > self.size and self.size > 0:
            reps = -(-total // self.size)
            perm = perm.repeat(reps)
        perm = perm[:total]
        return perm[self.rank::self.num_replicas]

    def __iter__(self):
        mine = self.order()[self.index:].tolist()
        return iter(mine)

    def __len__(self):
        return self.per_rank - self.index

    def state_dict(self):
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed, "size": self.size,
                "num_replicas": self.num_replicas, "shuffle": self.shuffle, "drop_last": self.drop_last}

    def load_state_dict(self, sd):
        for key in ("size", "num_replicas", "seed", "shuffle", "drop_last"):
            if key in sd and sd[key] != getattr(self, key):
                raise _C.MismatchError(f"ResumableSampler: checkpoint has {key}={sd[key]!r}, "
                                       f"this sampler has {getattr(self, key)!r}")
        index = int(sd["index"])
        if not 0 <= index <= self.per_rank:
            raise _C.CorruptionError(f"ResumableSampler: index {index} is outside [0, {self.per_rank}]")
        self.epoch, self.index = int(sd["epoch"]), index


class ResumableLoader:
    """A DataLoader whose position (epoch, batches handed out) is checkpointed.

        loader = preempt.ResumableLoader(dataset, batch_size=32, shuffle=True, seed=0, num_workers=2)
        rt.track("data", loader)
        step = rt.restore()
        batches = loader.forever()            # crosses epochs; or `for batch in loader:` per epoch

    Keyword arguments other than the sampler's (shuffle, seed, num_replicas, rank) go to
    `torch.utils.data.DataLoader` (`sampler`, `batch_sampler`, `generator` are set here).
    """

    def __init__(self, dataset, *, batch_size=1, shuffle=True, seed=0, num_replicas=None, rank=None,
                 drop_last=False, **loader_kwargs):
        for k in ("sampler", "batch_sampler", "generator", "shuffle"):
            if k in loader_kwargs:
                raise _C.InvalidArgumentError(f"ResumableLoader: '{k}' is set by the loader itself")
        if batch_size < 1:
            raise _C.InvalidArgumentError(f"ResumableLoader: batch_size must be >= 1, not {batch_size}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.drop_last = bool(drop_last)
        self.sampler = ResumableSampler(dataset, shuffle=shuffle, seed=seed, num_replicas=num_replicas,
                                        rank=rank, drop_last=False)
        self.loader_kwargs = loader_kwargs
        self.batches_seen = 0  # in the current epoch, handed to the trainer
        self._live = weakref.WeakSet()  # epochs being iterated (their workers run until closed)

    @property
    def epoch(self):
        return self.sampler.epoch

    def batches_per_epoch(self):
        n = self.sampler.per_rank
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __len__(self):
        return self.batches_per_epoch()

    def __iter__(self):
        """The rest of the current epoch; the epoch advances when it is exhausted."""
        epoch = self._rest_of_epoch()
        self._live.add(epoch)
        return epoch

    def close(self):
        """Stops the worker processes of every iteration in progress (`Runtime.close()` calls it
        for a tracked loader). A worker left running when the interpreter exits can hang the exit.
        The position is kept: iterating again (`forever()` goes on by itself) starts new workers
        at the next batch not handed out."""
        for epoch in list(self._live):
            epoch.close()

    def _rest_of_epoch(self):
        self.sampler.index = min(self.batches_seen * self.batch_size, self.sampler.per_rank)
        remaining = self.batches_per_epoch() - self.batches_seen
        if remaining > 0:
            g = torch.Generator()
            g.manual_seed((self.sampler.seed * 1000003 + self.sampler.epoch) * 1000003 + self.batches_seen)
            loader = torch.utils.data.DataLoader(self.dataset, batch_size=self.batch_size, sampler=self.sampler,
                                                 drop_last=self.drop_last, generator=g, **self.loader_kwargs)
            it = iter(loader)
            try:
                for _ in range(remaining):
                    batch = next(it)
                    self.batches_seen += 1
                    yield batch
            finally:
                shutdown = getattr(it, "_shutdown_workers", None)  # absent without workers
                if shutdown is not None:
                    shutdown()
                del it
        self.sampler.set_epoch(self.sampler.epoch + 1)
        self.batches_seen = 0

    def forever(self):
        """An endless stream of batches across epochs."""
        while True:
            yielded = False
            for batch in self:
                yielded = True
                yield batch
            if not yielded and self.batches_per_epoch() == 0:
                raise _C.InvalidArgumentError("ResumableLoader: the dataset yields no batch")

    def state_dict(self):
        return {"sampler": self.sampler.state_dict(), "batches_seen": self.batches_seen,
                "batch_size": self.batch_size, "drop_last": self.drop_last}

    def load_state_dict(self, sd):
        if sd.get("batch_size", self.batch_size) != self.batch_size:
            raise _C.MismatchError(f"ResumableLoader: checkpoint has batch_size={sd['batch_size']}, "
                                   f"this loader has {self.batch_size}")
        self.sampler.load_state_dict(sd["sampler"])
        seen = int(sd["batches_seen"])
        if not 0 <= seen <= self.batches_per_epoch():
            raise _C.CorruptionError(f"ResumableLoader: batches_seen {seen} is outside [0, {self.batches_per_epoch()}]")
        self.batches_seen = seen
