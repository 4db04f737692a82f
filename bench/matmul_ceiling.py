#!/usr/bin/env python3
"""bench/matmul_ceiling.py - the dense matmul rate of the current card.

Times torch.matmul (cuBLAS) on square bf16 and fp16 matrices with
triton.testing.do_bench and prints TFLOP/s (2 n^3 / time) as JSON lines: the
ceiling that the attention kernels' effective TFLOP/s are set against, measured
on the card the kernels ran on.

    python3 bench/matmul_ceiling.py [--sizes 4096,8192,16384]
"""
import argparse
import json

import torch
import triton


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="4096,8192,16384")
    args = parser.parse_args()
    card = torch.cuda.get_device_name()
    for dtype in (torch.bfloat16, torch.float16):
        for n in (int(s) for s in args.sizes.split(",")):
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            ms = triton.testing.do_bench(lambda: a @ b, warmup=100, rep=500)
            print(json.dumps({"card": card, "dtype": str(dtype).replace("torch.", ""), "n": n, "ms": ms,
                              "tflops": 2.0 * n**3 / (ms * 1e-3) / 1e12}))


if __name__ == "__main__":
    main()
