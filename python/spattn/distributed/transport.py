"""How context-parallel ranks move tensors: one small interface, two transports.

A transport knows its rank and world size and does two things:

- ``start_exchange(sends, recvs)``: point-to-point, all at once: ``sends[peer]``
  goes to ``peer`` and ``recvs[peer]`` (preallocated, contiguous) is filled
  from ``peer``; every rank calls it with matching pairs, in the same order of
  calls. It returns at once; the returned object's ``wait(peer)`` returns when
  the rows from `peer` may be read and ``wait()`` when all is done
  (``exchange`` is both). Peers are served in stages (``exchange_order``). ``bytes_sent`` counts
  what this rank has sent so far.
- ``all_gather(x, lengths)``: every rank's tensor (first dimension
  ``lengths[rank]``), in rank order.

``TorchTransport`` runs them on a ``torch.distributed`` process group
(``batch_isend_irecv``; NCCL for CUDA tensors, gloo for CPU tensors and for
CUDA tensors staged through host memory, as the group was created, e.g. under
``torchrun``). ``InProcessGroup`` runs the ranks
as threads of one process, for tests without several processes.
"""
from __future__ import annotations

import threading
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.distributed as dist


class Transport:
    """The interface; see the module's notes."""

    rank: int
    world_size: int

    def __init__(self) -> None:
        self.bytes_sent = 0

    def start_exchange(self, sends: Dict[int, torch.Tensor], recvs: Dict[int, torch.Tensor]) -> "Pending":
        raise NotImplementedError

    def exchange(self, sends: Dict[int, torch.Tensor], recvs: Dict[int, torch.Tensor]) -> None:
        self.start_exchange(sends, recvs).wait()

    def all_gather(self, x: torch.Tensor, lengths: Sequence[int]) -> List[torch.Tensor]:
        raise NotImplementedError

    def _count(self, sends: Dict[int, torch.Tensor]) -> None:
        for peer, t in sends.items():
            if peer == self.rank or not 0 <= peer < self.world_size:
                raise ValueError(f"rank {self.rank} cannot send to peer {peer} (world size {self.world_size})")
            self.bytes_sent += t.numel() * t.element_size()


class Pending:
    """An exchange under way. ``wait(peer)`` returns once the rows from `peer` may be read;
    ``wait()`` once everything (sends too) is done. `finish(peer)` does the waiting for one peer
    (None: what is left after the peers), once each."""

    def __init__(self, peers: Sequence[int], finish: Callable[[Optional[int]], None]):
        self._left = list(peers)
        self._finish = finish
        self._done = False

    def wait(self, peer: Optional[int] = None) -> None:
        for p in ([peer] if peer is not None else list(self._left)):
            if p in self._left:
                self._left.remove(p)
                self._finish(p)
        if peer is None and not self._done:
            self._done = True
            self._finish(None)


def exchange_order(rank: int, world_size: int) -> List[int]:
    """The peers rank `rank` receives from, stage by stage: at stage d (1 .. P-1) every rank sends
    to rank + d and receives from rank - d (mod P), so each stage pairs ranks consistently."""
    return [(rank - d) % world_size for d in range(1, world_size)]


class TorchTransport(Transport):
    """Point-to-point over a torch.distributed process group (None: the default group)."""

    def __init__(self, group=None):
        super().__init__()
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("spattn.distributed needs torch.distributed initialised (e.g. "
                             "torch.distributed.init_process_group under torchrun), or an explicit transport")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)

    def _global(self, peer: int) -> int:
        return peer if self.group is None else dist.get_global_rank(self.group, peer)

    def _staged(self, t: torch.Tensor) -> bool:
        """CUDA tensors cross a gloo group through host memory (gloo moves host buffers only)."""
        return t.is_cuda and dist.get_backend(self.group) == "gloo"

    def start_exchange(self, sends: Dict[int, torch.Tensor], recvs: Dict[int, torch.Tensor]) -> Pending:
        """One batch_isend_irecv per stage (exchange_order): a stage's rows can be read once that
        stage is done, while the later ones are still on the wire."""
        self._count(sends)
        wire_recvs = {peer: t.cpu() if self._staged(t) else t for peer, t in recvs.items() if t.numel()}
        works: Dict[int, list] = {}
        for d in range(1, self.world_size):
            to, source = (self.rank + d) % self.world_size, (self.rank - d) % self.world_size
            ops = []
            if to in sends and sends[to].numel():
                t = sends[to]
                ops.append(dist.P2POp(dist.isend, (t.cpu() if self._staged(t) else t).contiguous(),
                                      self._global(to), self.group))
            if source in wire_recvs:
                ops.append(dist.P2POp(dist.irecv, wire_recvs[source], self._global(source), self.group))
            works[source] = dist.batch_isend_irecv(ops) if ops else []

        @torch.no_grad()  # the buffers may be autograd outputs: filling them is no operation of the graph
        def finish(peer: Optional[int]) -> None:
            if peer is None:
                return
            for work in works[peer]:  # NCCL: the current stream waits; gloo: the host waits
                work.wait()
            t = wire_recvs.get(peer)
            if t is not None and t is not recvs[peer]:
                recvs[peer].copy_(t)
        return Pending(exchange_order(self.rank, self.world_size), finish)

    def all_gather(self, x: torch.Tensor, lengths: Sequence[int]) -> List[torch.Tensor]:
        longest = max(lengths)
        staged = self._staged(x)
        padded = x.new_zeros((longest,) + tuple(x.shape[1:]), device="cpu" if staged else x.device)
        padded[:x.shape[0]] = x
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded, group=self.group)
        return [part[:n].to(x.device) for part, n in zip(parts, lengths)]


class InProcessGroup:
    """`world_size` ranks as threads of this process, exchanging through shared memory.

    ``run(fn)`` calls ``fn(transport)`` on one thread per rank and returns
    their results in rank order (re-raising the first error). Each exchange
    waits at most ``timeout`` seconds for its peers, then raises instead of
    hanging. On CPU tensors autograd runs a rank's backward on the thread that
    calls it, so a rank may call ``backward()`` inside ``fn``.
    """

    def __init__(self, world_size: int, timeout: float = 120.0):
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
        self.world_size = world_size
        self.timeout = timeout
        self._mail: Dict[tuple, torch.Tensor] = {}
        self._arrived = threading.Condition()

    def transport(self, rank: int) -> "InProcessTransport":
        return InProcessTransport(self, rank)

    def run(self, fn: Callable[[Transport], object]) -> list:
        results: list = [None] * self.world_size
        errors: list = []

        def body(rank: int) -> None:
            try:
                results[rank] = fn(self.transport(rank))
            except BaseException as error:  # reported below, after every thread ends
                errors.append(error)
                with self._arrived:
                    self._arrived.notify_all()

        threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(self.world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results

    def _post(self, key: tuple, t: torch.Tensor) -> None:
        with self._arrived:
            self._mail[key] = t
            self._arrived.notify_all()

    def _take(self, key: tuple) -> torch.Tensor:
        with self._arrived:
            if not self._arrived.wait_for(lambda: key in self._mail, timeout=self.timeout):
                raise TimeoutError(f"rank {key[1]} waited {self.timeout} s for message {key[2]} from rank {key[0]}")
            return self._mail.pop(key)


class InProcessTransport(Transport):
    """One rank of an InProcessGroup."""

    def __init__(self, group: InProcessGroup, rank: int):
        super().__init__()
        self.group = group
        self.rank = rank
        self.world_size = group.world_size
        self._calls = 0

    def start_exchange(self, sends: Dict[int, torch.Tensor], recvs: Dict[int, torch.Tensor]) -> Pending:
        self._count(sends)
        call = self._calls
        self._calls += 1
        for peer, t in sends.items():
            if t.numel():  # empty messages are not sent (nor, by TorchTransport, over the wire)
                self.group._post((self.rank, peer, call), t.detach().clone())

        @torch.no_grad()  # as in TorchTransport
        def finish(peer: Optional[int]) -> None:
            t = recvs.get(peer)
            if t is not None and t.numel():
                t.copy_(self.group._take((peer, self.rank, call)))
        return Pending(exchange_order(self.rank, self.world_size), finish)

    def all_gather(self, x: torch.Tensor, lengths: Sequence[int]) -> List[torch.Tensor]:
        sends = {peer: x for peer in range(self.world_size) if peer != self.rank}
        recvs = {peer: x.new_empty((lengths[peer],) + tuple(x.shape[1:]))
                 for peer in range(self.world_size) if peer != self.rank}
        sent = self.bytes_sent
        self.exchange(sends, recvs)
        self.bytes_sent = sent  # gathers are not attention traffic
        return [x if r == self.rank else recvs[r] for r in range(self.world_size)]


def transport_for(group) -> Transport:
    """`group` as a transport: a Transport as it is, else a torch.distributed group (None: default)."""
    if isinstance(group, Transport):
        return group
    return TorchTransport(group)
