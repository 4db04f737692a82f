#!/usr/bin/env python3
"""tests/cli/fuzz_cli.py - generated malformed and extreme invocations of every subcommand.

usage: fuzz_cli.py SPATTN WORK_DIR [--cases N] [--seed S] [--jobs J]

Builds N invocations (default 300) of `spattn run | mask | bench` from a seeded
generator: valid small problems with random flag mutations (unknown, repeated,
valueless and positional words; non-numbers, negatives, zeros, overflowing and
huge values; lengths of 10^9 tokens and more; bad dtypes, layouts, patterns,
outputs under files, in directories, as directories). Each runs under an
address-space limit (ulimit -v, MEMORY_LIMIT) and a wall-clock limit
(TIME_LIMIT), and must:
  - exit with 0 or 2, never by a signal or past the time limit;
  - on exit 2, print exactly one line `spattn: error: ...` on stderr (besides
    progress lines in brackets);
  - leave every output file it names either absent or complete (a PNG that
    ends with its IEND chunk, JSON that parses), and no temporary beside it.
Prints the number of cases and exits 1 listing the ones that failed.
"""
import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

MEMORY_LIMIT = 2 << 30  # bytes of address space per case
TIME_LIMIT = 20          # seconds per case

SMALL_LENGTHS = ["1", "7", "64", "130", "257", "512"]
HUGE_LENGTHS = ["1000000000", "100000000000", "1000000000000", "4611686018427387904", "9223372036854775807"]
BAD_INTS = ["0", "-1", "-9223372036854775808", "99999999999999999999", "12x", "", "1e3", "0x10", "nan", " 5"]
BAD_FLOATS = ["-0.5", "2", "nan", "inf", "-inf", "1e400", "x", ""]
PATTERNS = ["dense", "causal", "block-diagonal", "sliding-window", "streaming", "strided", "fixed", "dilated",
            "bigbird", "longformer", "random", "custom", "topk", "dilated+sliding-window", "causal+streaming",
            "nope", "", "+", "dense+", "topk+causal"]
BENCH_ENTRIES = ["dense", "causal", "sliding-window", "streaming", "block-diagonal", "strided", "bigbird",
                 "random", "fixed", "longformer", "nope"]


def length(rng):
    return rng.choice(SMALL_LENGTHS) if rng.random() < 0.6 else rng.choice(HUGE_LENGTHS + BAD_INTS)


def small_int(rng, good):
    return rng.choice(good) if rng.random() < 0.7 else rng.choice(BAD_INTS + HUGE_LENGTHS)


def pattern_flags(rng, data_dir):
    name = rng.choice(PATTERNS)
    flags = ["--pattern", name]
    extra = {
        "--window": ["1", "3", "64", "300"], "--sink": ["0", "4"], "--stride": ["1", "8", "64"],
        "--summary": ["0", "2", "9"], "--segments": ["64", "64,128", "0", "64,"], "--rates": ["1", "2,4", "3"],
        "--window-blocks": ["1", "3"], "--global-blocks": ["0", "1"], "--random-blocks": ["0", "2", "99"],
        "--global-tokens": ["0", "0,5", "5,5", "1000"], "--density": ["0", "0.3", "1"],
        "--block": ["1", "16", "32", "64", "1000000"], "--block-q": ["16", "48"], "--block-k": ["32", "80"],
        "--diagonal-block": ["16"], "--window-left": ["0", "5"], "--window-right": ["0", "3"],
        "--topk": ["1", "3"], "--tau": ["0.5", "0.9", "1"], "--sink-blocks": ["0", "1"],
        "--local-blocks": ["0", "2"], "--min-blocks": ["0", "2"], "--max-blocks": ["0", "3"],
        "--seed": ["0", "7"],
        "--mask-file": [os.path.join(data_dir, f) for f in ("good.txt", "ragged.txt", "bad_char.txt")] + ["/nonexistent"],
    }
    for flag in rng.sample(sorted(extra), rng.randint(0, 4)):
        value = rng.choice(extra[flag]) if rng.random() < 0.8 else rng.choice(BAD_INTS + BAD_FLOATS)
        flags += [flag, value]
    if rng.random() < 0.15:
        flags.append("--causal")
    if rng.random() < 0.05:
        flags = ["--heads-pattern", rng.choice(["dense,causal", "streaming", ",", "dense,,causal"])] + flags[2:]
    return flags


def shape_flags(rng, command):
    flags = ["--seq", length(rng)]
    sizes = [("--seq-k", SMALL_LENGTHS), ("--heads", ["1", "2", "4"])]
    if command == "run":
        sizes += [("--kv-heads", ["1", "2"]), ("--batch", ["1", "2"]), ("--head-dim", ["1", "16", "40", "64"])]
    for flag, good in sizes:
        if rng.random() < 0.25:
            flags += [flag, small_int(rng, good)]
    return flags


def output_path(rng, work, ext):
    choice = rng.random()
    if choice < 0.7:
        return os.path.join(work, f"out{rng.randint(0, 10**9)}{ext}")
    return rng.choice([work, os.path.join(work, "file.txt", "x" + ext), "/proc/x" + ext,
                       os.path.join(work, f"new{rng.randint(0, 10**9)}", "deeper", "x" + ext), ""])


def mutate(rng, words):
    """Unknown, repeated, valueless and stray words, at random."""
    if rng.random() < 0.7:
        return words
    words = list(words)
    at = rng.randint(0, len(words))
    mutation = rng.choice(["unknown", "repeat", "valueless", "stray", "eq", "drop", "switch-value", "help"])
    if mutation == "unknown":
        words.insert(at, rng.choice(["--windw", "--", "-x", "--seq-q", "--=3"]))
    elif mutation == "repeat" and words:
        flags = [w for w in words if w.startswith("--")]
        if flags:
            words += [rng.choice(flags), "3"]
    elif mutation == "valueless":
        words.append(rng.choice(["--seq", "--out", "--block", "--tau", "--patterns"]))
    elif mutation == "stray":
        words.insert(at, rng.choice(["extra", "5", "--seq5"]))
    elif mutation == "eq":
        words.insert(at, rng.choice(["--seq=64", "--heads=", "--block==4", "--check=yes"]))
    elif mutation == "drop" and words:
        del words[rng.randrange(len(words))]
    elif mutation == "switch-value":
        words += ["--causal=1"]
    elif mutation == "help":
        words.insert(at, "--help")
    return words


def make_case(rng, work, data_dir):
    command = rng.choice(["run", "run", "mask", "bench", "bench", "top"])
    if command == "top":
        return rng.choice([[], ["--version"], ["help"], ["frobnicate"], ["--bogus"], ["run"], ["mask"]]), []
    outputs = []
    if command == "run":
        words = ["run"] + shape_flags(rng, "run") + pattern_flags(rng, data_dir)
        for flag, values in (("--dtype", ["fp32", "fp16", "bf16", "fp8"]), ("--layout", ["bhld", "blhd", "x"]),
                             ("--backend", ["auto", "cpu", "reference", "cuda", "gpu"]),
                             ("--repeats", ["1", "2"] + BAD_INTS[:3])):
            if rng.random() < 0.3:
                words += [flag, rng.choice(values)]
        if rng.random() < 0.2:
            words.append("--json")
    elif command == "mask":
        out = output_path(rng, work, ".png")
        outputs = [out]
        words = ["mask"] + shape_flags(rng, "mask") + pattern_flags(rng, data_dir) + ["--out", out]
        if rng.random() < 0.3:
            words += ["--size", small_int(rng, ["16", "64", "300"])]
        if rng.random() < 0.2:
            words += ["--head", small_int(rng, ["0", "1"])]
    else:
        out = output_path(rng, work, ".json")
        outputs = [out]
        preset = rng.choice(["default", "seeds", "mask-build", "cpu", "topk", "nope"])
        seqs = ",".join(rng.choice(["64", "128", "130"]) for _ in range(rng.randint(1, 2)))
        if rng.random() < 0.35:
            seqs = rng.choice(HUGE_LENGTHS + BAD_INTS + ["64,,128", "64,1000000000"])
        words = ["bench", "--seqs", seqs, "--repeats", "1", "--budget", "0.01", "--out", out]
        if preset == "topk":
            words += ["--pattern", "topk", rng.choice(["--topk", "--tau"]), rng.choice(["2", "0.9", "0", "7"])]
            words += ["--block", rng.choice(["16", "32"]), "--heads", "1", "--head-dim", "16"]
        else:
            words += ["--preset", preset]
            if preset in ("default", "seeds", "cpu"):
                words += ["--heads", rng.choice(["1", "2", "0"]), "--head-dim", rng.choice(["16", "32"])]
            if preset == "cpu":
                words += ["--long-seq", rng.choice(["0", "512", "1000000000", "-1"])]
            if preset in ("default", "mask-build", "cpu") and rng.random() < 0.7:
                words += ["--patterns", ",".join(rng.sample(BENCH_ENTRIES, rng.randint(1, 2)))]
    return mutate(rng, words), outputs


def complete(path):
    """True when `path` is absent or a complete PNG / JSON file."""
    if not os.path.isfile(path):
        return True
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".png"):
        return data.startswith(b"\x89PNG\r\n\x1a\n") and data[-12:-4] == b"\x00\x00\x00\x00IEND"
    try:
        json.loads(data)
        return True
    except ValueError:
        return False


def limit_resources():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_case(spattn, words, outputs, work):
    """ "ok CODE" when the case ended as it must, else what went wrong."""
    try:
        p = subprocess.run([spattn] + words, cwd=work, capture_output=True, timeout=TIME_LIMIT,
                           preexec_fn=limit_resources, env=dict(os.environ, OMP_NUM_THREADS="2"))
    except subprocess.TimeoutExpired:
        return f"ran past {TIME_LIMIT} s"
    if p.returncode < 0:
        return f"killed by signal {-p.returncode}"
    if p.returncode not in (0, 2):
        return f"exit code {p.returncode}"
    stderr = p.stderr.decode(errors="replace").splitlines()
    messages = [line for line in stderr if not (line.startswith("[") and line.endswith("]"))]
    if p.returncode == 2 and (len(messages) != 1 or not messages[0].startswith("spattn: error: ")):
        return f"stderr is not one error line: {stderr!r}"
    for path in outputs:
        if path and not complete(path):
            return f"half-written output {path}"
        directory, name = os.path.split(path)
        directory = directory or work
        if name and os.path.isdir(directory) and any(f.startswith(name + ".part-") for f in os.listdir(directory)):
            return f"temporary left beside {path}"
    return f"ok {p.returncode}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spattn")
    parser.add_argument("work")
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    data_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    with open(os.path.join(args.work, "file.txt"), "w") as f:
        f.write("a file, not a directory\n")
    rng = random.Random(args.seed)
    cases = [make_case(rng, args.work, data_dir) for _ in range(args.cases)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        verdicts = list(pool.map(lambda c: run_case(args.spattn, c[0], c[1], args.work), cases))
    failures = [(words, why) for (words, _), why in zip(cases, verdicts) if not why.startswith("ok")]
    print(f"{len(cases)} generated cases: {verdicts.count('ok 0')} exited 0, {verdicts.count('ok 2')} exited 2 "
          f"with one error line, {len(failures)} failed")
    for words, why in failures:
        print(f"FAIL: spattn {' '.join(repr(w) if not w or ' ' in w else w for w in words)}: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
