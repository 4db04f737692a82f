"""bench/cpu_results.py - where the CPU benchmarks write: this machine's processor name
and thread count, and its results folder bench/results/cpu-<processor>-<threads>t/."""
import os
import platform
import re

import torch


def cpu_name() -> str:
    """The processor's model name (/proc/cpuinfo), else what platform reports."""
    try:
        with open("/proc/cpuinfo") as f:
            found = re.findall(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        return found[0].strip() if found else platform.processor()
    except OSError:
        return platform.processor()


def results_path(file_name: str) -> str:
    """bench/results/cpu-<processor>-<threads>t/<file_name> (the folder made)."""
    slug = re.sub(r"[^a-z0-9]+", "-", cpu_name().lower()).strip("-") + f"-{torch.get_num_threads()}t"
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", f"cpu-{slug}")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, file_name)
