#!/usr/bin/env python3
"""bench/cp_scaling.py - context parallelism on several GPUs: spattn.distributed.attention against an
all-gather of K/V followed by spattn, and PyTorch's context-parallel ring over SDPA, in the same run.

One process per GPU under torchrun (NCCL, bf16); without CUDA the ranks run on the CPU over gloo
in float32, for smoke tests. Each rank makes its own random shard of q, k and v (seeded by its rank,
no global tensors) of the layout's local length, batch 1, and the mask is a SequenceMask of a
pattern taken from a short mask (blocks of 128 x 128):

  * causal, zigzag layout;
  * window: sliding window of 4096 keys, contiguous layout;
  * streaming: sink 128 + window 4096, contiguous;
  * dilated: segments [2048, 8192] at rates [1, 4], causal, contiguous;
  * random: 10% of the 128-blocks (plus the diagonal), causal, contiguous; its block table belongs
    to its length, so it is built whole, and only up to L = 1048576 (skipped above).

For each pattern, length L (--lengths) and pass (fwd; fwdbwd = forward + out.backward(grad)):

  * spattn: spattn.distributed.attention with a TorchTransport (its plan built beforehand; the
    bytes the forward sends are recorded per rank);
  * all-gather: K and V all-gathered (spattn.distributed.unshard), then for each of the rank's
    query chunks one spattn.attention call over all keys, the pattern framed at the chunk; the
    backward reduce-scatters the K and V gradients to their owners;
  * torch CP (causal only, CUDA only): torch.distributed.tensor.experimental.context_parallel
    over F.scaled_dot_product_attention(is_causal=True) on a 1-D DeviceMesh; its head-tail
    load balancing is the zigzag layout; K/V rotate by all-to-all (a ring) or one all-gather
    (--torch-rotate); kv heads are repeated to the query heads first when they differ.

Each iteration runs between torch.cuda.synchronize() and dist.barrier(); a time is the slowest
rank's (all_reduce MAX), and the table gives the median over --iters iterations after --warmup.
Peak memory is torch.cuda.max_memory_allocated() per rank, reset before each method. A method
that runs out of memory on every rank is recorded as "oom" and the run goes on; one that runs out
on some ranks only leaves the others waiting in a collective until the process group's timeout
(--timeout-min) ends the run. The JSON (rewritten after every case) keeps every rank's numbers.

    torchrun --nproc-per-node <GPUs> bench/cp_scaling.py [--patterns causal,window,streaming,dilated,random]
        [--lengths 262144,1048576] [--passes fwd,fwdbwd] [--heads 16] [--kv-heads 16] [--head-dim 128]
        [--warmup 2] [--iters 5] [--torch-rotate alltoall] [--out bench/results/cuda-<gpu>/cp_scaling.json]
"""
import argparse
import datetime
import gc
import json
import os
import re
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import spattn
from spattn import distributed as sd
from spattn import patterns

BLOCK = 128
RANDOM_MAX_LEN = 1 << 20
LAYOUTS = {"causal": "zigzag", "window": "contiguous", "streaming": "contiguous", "dilated": "contiguous",
           "random": "contiguous"}


def sequence_mask(name: str, L: int, heads: int) -> sd.SequenceMask:
    """The pattern `name` over L positions, taken from a mask built on a short length (the random
    pattern's block table belongs to its length: its mask is built whole)."""
    short = 4 * BLOCK
    if name == "causal":
        mask = patterns.causal(short, block_size=BLOCK)
    elif name == "window":
        mask = patterns.sliding_window(short, window=4096, block_size=BLOCK)
    elif name == "streaming":
        mask = patterns.streaming(short, sink=128, window=4096, block_size=BLOCK)
    elif name == "dilated":
        mask = patterns.dilated(short, segments=[2048, 8192], rates=[1, 4], causal=True, block_size=BLOCK,
                                num_heads=heads)
    elif name == "random":
        g = torch.Generator().manual_seed(0)  # the same table on every rank
        nb = -(-L // BLOCK)
        blocks = (torch.rand(nb, nb, generator=g) < 0.10) | torch.eye(nb, dtype=torch.bool)
        return sd.SequenceMask.of(patterns.custom(blocks, block_size=BLOCK, causal=True, seq_lengths=(L, L)))
    else:
        raise ValueError(f"unknown pattern {name!r}; choose from {', '.join(LAYOUTS)}")
    return sd.SequenceMask(mask.pattern, L, (BLOCK, BLOCK))


class _GatherKV(torch.autograd.Function):
    """K and V of the whole sequence from every rank's shard (all-gather); the backward sums each
    rank's gradients of the whole K and V and hands every rank its shard's rows (reduce-scatter)."""

    @staticmethod
    def forward(ctx, k, v, layout, transport):
        ctx.layout, ctx.transport = layout, transport
        return sd.unshard(k, layout, transport), sd.unshard(v, layout, transport)

    @staticmethod
    def backward(ctx, dk_all, dv_all):
        layout, rank = ctx.layout, ctx.transport.rank
        lengths = [layout.local_len(r) for r in range(layout.world_size)]
        longest = max(lengths)
        # Every rank's rows in its shard's order, each padded to the longest shard with row 0
        # (the padding rows are summed too, then dropped).
        order = torch.cat([F.pad(layout.positions(r), (0, longest - n)) for r, n in enumerate(lengths)])
        grads = []
        for g in (dk_all, dv_all):
            rows = g.movedim(2, 0)  # (L, B, Hkv, D)
            mine = g.new_empty((longest,) + tuple(rows.shape[1:]))
            dist.reduce_scatter_tensor(mine, rows.index_select(0, order.to(g.device)), group=ctx.transport.group)
            grads.append(mine[:lengths[rank]].movedim(0, 2))
        return grads[0], grads[1], None, None


class Case:
    """One pattern, length and pass on this rank: the shards, the mask and the methods' steps."""

    def __init__(self, name, L, backward, args, device, dtype):
        self.name, self.L, self.backward = name, L, backward
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.mask = sequence_mask(name, L, args.heads)
        self.layout = sd.ShardLayout(LAYOUTS[name], L, self.world, BLOCK)
        local = self.layout.local_len(self.rank)
        g = torch.Generator(device=device).manual_seed(self.rank)
        q_shape, kv_shape = (1, args.heads, local, args.head_dim), (1, args.kv_heads, local, args.head_dim)
        self.q = torch.randn(q_shape, generator=g, device=device, dtype=dtype)
        self.k = torch.randn(kv_shape, generator=g, device=device, dtype=dtype)
        self.v = torch.randn(kv_shape, generator=g, device=device, dtype=dtype)
        self.grad = torch.randn(q_shape, generator=g, device=device, dtype=dtype) if backward else None
        for t in (self.q, self.k, self.v):
            t.requires_grad_(backward)
        self.transport = sd.TorchTransport()
        self.forward_bytes = []

    def clear_grads(self):
        for t in (self.q, self.k, self.v):
            t.grad = None

    def finish(self, out):
        if self.backward:
            out.backward(self.grad)

    def spattn_step(self):
        before = self.transport.bytes_sent
        out = sd.attention(self.q, self.k, self.v, self.mask, group=self.transport, layout=self.layout)
        self.forward_bytes.append(self.transport.bytes_sent - before)
        self.finish(out)

    def prepare_allgather(self):
        """Per query chunk: its offset in the shard, its length and the framed pattern's mask over
        all keys (built once, outside the timed calls, as spattn's plan is)."""
        self.chunks, offset = [], 0
        for start, end in self.layout.pieces(self.rank):
            framed = self.mask.pattern.framed(start, 0, self.L, self.L)
            mask = spattn.BlockMask.from_pattern(framed, end - start, self.L, (BLOCK, BLOCK),
                                                 num_heads=self.q.shape[1], device=self.q.device)
            self.chunks.append((offset, end - start, mask))
            offset += end - start

    def allgather_step(self):
        k_all, v_all = _GatherKV.apply(self.k, self.v, self.layout, self.transport)
        out = torch.cat([spattn.attention(self.q.narrow(2, offset, n), k_all, v_all, mask)
                         for offset, n, mask in self.chunks], dim=2)
        self.finish(out)

    def torch_step(self):
        rep = self.q.shape[1] // self.k.shape[1]
        k, v = (self.k, self.v) if rep == 1 else (self.k.repeat_interleave(rep, 1), self.v.repeat_interleave(rep, 1))
        out = F.scaled_dot_product_attention(self.q, k, v, is_causal=True)  # patched by context_parallel
        self.finish(out)


def sync(on_cuda):
    if on_cuda:
        torch.cuda.synchronize()


def free(on_cuda):
    gc.collect()
    if on_cuda:
        torch.cuda.empty_cache()


def measure(case, step, args, on_cuda):
    """The median over the timed iterations of the slowest rank's time (ms), and every rank's
    peak memory; or {"error": "oom" or the error's text} when a rank failed."""
    device = case.q.device
    status, times = None, []
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    try:
        for i in range(args.warmup + args.iters):
            case.clear_grads()
            sync(on_cuda)
            dist.barrier()
            start = time.perf_counter()
            step()
            sync(on_cuda)
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
    except torch.OutOfMemoryError:
        status = "oom"
    except Exception as error:  # recorded; the run goes on
        status = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    case.clear_grads()
    peak = torch.cuda.max_memory_allocated() / 2**30 if on_cuda else None
    free(on_cuda)
    ranks = [None] * case.world
    dist.all_gather_object(ranks, {"status": status, "peak_gb": peak})
    failed = [r["status"] for r in ranks if r["status"] is not None]
    if failed:
        return {"error": "oom" if "oom" in failed else failed[0], "ranks": ranks}
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    slowest = [t * 1e3 for t in slowest.tolist()]
    return {"ms": statistics.median(slowest), "iteration_ms": slowest,
            "peak_gb_per_rank": [r["peak_gb"] for r in ranks]}


def run_torch_cp(case, args, on_cuda, mesh):
    """PyTorch's context-parallel SDPA (causal) on this rank's shards, or why it did not run."""
    if not on_cuda:
        return {"skipped": "needs CUDA"}
    try:
        from torch.distributed.tensor.experimental import context_parallel
        from torch.distributed.tensor.experimental._attention import set_rotate_method
        set_rotate_method(args.torch_rotate)
        # The shards are made directly, so context_parallel has none of ours to shard; it sizes
        # its load balancer from a buffer, which is all this one is for.
        marker = torch.zeros(1, 2 * case.world, device=case.q.device)
        with context_parallel(mesh, buffers=[marker], buffer_seq_dims=[1], no_restore_buffers={marker}):
            return measure(case, case.torch_step, args, on_cuda)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}".splitlines()[0][:300]}


def machine(on_cuda):
    """The machine's description and its results folder's name (as the other bench/results folders)."""
    if on_cuda:
        card = torch.cuda.get_device_name()
        info = {"gpu": card, "gpus": torch.cuda.device_count()}
        return info, "cuda-" + re.sub(r"[^a-z0-9]+", "-", card.lower()).strip("-")
    from cpu_results import cpu_name
    cpu = cpu_name()
    info = {"cpu": cpu, "threads_per_rank": torch.get_num_threads()}
    return info, "cpu-" + re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-") + f"-{torch.get_num_threads()}t"


def cell(result):
    if result is None or "skipped" in result:
        return "-"
    if "error" in result:
        return "oom" if result["error"] == "oom" else "error"
    return f"{result['ms']:.1f}"


def peak(result):
    if not result or "ms" not in result or result["peak_gb_per_rank"][0] is None:
        return "-"
    return f"{max(result['peak_gb_per_rank']):.1f}"


def table_row(row):
    if "skipped" in row:
        return f"| {row['pattern']} | {row['L']} | {row['P']} | {row['pass']} | skipped: {row['skipped']} | | | | |"
    sent = row.get("spattn_bytes_sent_per_rank")
    sent = f"{max(sent) / 2**20:.1f}" if sent else "-"
    peaks = " / ".join(peak(row.get(m)) for m in ("spattn", "allgather", "torch_cp"))
    return (f"| {row['pattern']} | {row['L']} | {row['P']} | {row['pass']} | {cell(row['spattn'])} | "
            f"{cell(row['allgather'])} | {cell(row.get('torch_cp'))} | {sent} | {peaks} |")


def run_case(row, name, L, backward, args, device, dtype, on_cuda, mesh):
    """Fills `row` with every method's result for one pattern, length and pass."""
    try:
        case = Case(name, L, backward, args, device, dtype)
    except torch.OutOfMemoryError:
        case = None
    free(on_cuda)
    made = [None] * dist.get_world_size()
    dist.all_gather_object(made, case is not None)
    if not all(made):
        row["spattn"] = row["allgather"] = {"error": "oom"}
        return
    start = time.perf_counter()
    sd.plan_for(case.mask, case.layout, args.heads).rank(case.rank)
    plan_s = time.perf_counter() - start
    row["spattn"] = measure(case, case.spattn_step, args, on_cuda)
    start = time.perf_counter()
    case.prepare_allgather()
    masks_s = time.perf_counter() - start
    row["allgather"] = measure(case, case.allgather_step, args, on_cuda)
    if name == "causal":
        row["torch_cp"] = run_torch_cp(case, args, on_cuda, mesh)
        row["torch_cp_rotate"] = args.torch_rotate
    per_rank = [None] * case.world
    dist.all_gather_object(per_rank, {"bytes": case.forward_bytes[0] if case.forward_bytes else None,
                                      "plan_s": plan_s, "allgather_masks_s": masks_s})
    sent = [r["bytes"] for r in per_rank]
    row["spattn_bytes_sent_per_rank"] = sent if None not in sent else None
    row["spattn_plan_s_per_rank"] = [r["plan_s"] for r in per_rank]
    row["allgather_masks_s_per_rank"] = [r["allgather_masks_s"] for r in per_rank]
    del case
    free(on_cuda)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patterns", default=",".join(LAYOUTS), help=f"comma-separated, from {', '.join(LAYOUTS)}")
    ap.add_argument("--lengths", default="262144,1048576")
    ap.add_argument("--passes", default="fwd,fwdbwd")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--torch-rotate", choices=("alltoall", "allgather"), default="alltoall",
                    help="how torch CP moves K/V: alltoall passes them to the next rank each step (a ring), "
                         "allgather gathers them once (PyTorch's default)")
    ap.add_argument("--timeout-min", type=float, default=15, help="the process group's timeout")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    names = args.patterns.split(",")
    for name in names:
        if name not in LAYOUTS:
            ap.error(f"unknown pattern {name!r}; choose from {', '.join(LAYOUTS)}")
    if args.iters < 1 or args.warmup < 0:
        ap.error("--iters must be >= 1 and --warmup >= 0")
    passes = args.passes.split(",")
    if any(p not in ("fwd", "fwdbwd") for p in passes):
        ap.error(f"--passes takes fwd and fwdbwd, got {args.passes!r}")

    on_cuda = torch.cuda.is_available()
    timeout = datetime.timedelta(minutes=args.timeout_min)
    if on_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=timeout)
        dtype = torch.bfloat16
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    else:
        device, dtype, mesh = torch.device("cpu"), torch.float32, None
        dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    info, slug = machine(on_cuda)
    out_path = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", slug,
                                        "cp_scaling.json")
    result = {"machine": info, "torch": torch.__version__, "world_size": world, "dtype": str(dtype).split(".")[-1],
              "backend": dist.get_backend(), "args": vars(args), "cases": []}
    header = ("| pattern | L | P | pass | spattn ms | all-gather ms | torch CP ms | spattn MB sent max | "
              "peak GB max (spattn / all-gather / torch CP) |\n|---|---|---|---|---|---|---|---|---|")
    if rank == 0:
        where = info.get("gpu", info.get("cpu"))
        print(f"# context parallelism over {world} ranks ({dist.get_backend()}), {where}, {result['dtype']}, "
              f"Hq={args.heads}, Hkv={args.kv_heads}, D={args.head_dim}, blocks {BLOCK}, torch {torch.__version__}; "
              f"median of {args.iters} iterations of the slowest rank\n", flush=True)
        print(header, flush=True)

    for name in names:
        for L in (int(x) for x in args.lengths.split(",")):
            for pass_ in passes:
                row = {"pattern": name, "layout": LAYOUTS[name], "L": L, "P": world, "pass": pass_}
                if name == "random" and L > RANDOM_MAX_LEN:
                    row["skipped"] = f"the random block table is built whole, only up to L = {RANDOM_MAX_LEN}"
                else:
                    run_case(row, name, L, pass_ == "fwdbwd", args, device, dtype, on_cuda, mesh)
                result["cases"].append(row)
                if rank == 0:
                    print(table_row(row), flush=True)
                    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
                    with open(out_path, "w") as f:
                        json.dump(result, f, indent=1)
    if rank == 0:
        errors = [f"{method}, {row['pattern']} L={row['L']} {row['pass']}: {row[method]['error']}"
                  for row in result["cases"] for method in ("spattn", "allgather", "torch_cp")
                  if row.get(method, {}).get("error", "oom") != "oom"]
        print("".join(f"\n{e}" for e in errors) + f"\n\nwrote {out_path}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
