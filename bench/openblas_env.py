"""OpenBLAS settings for the references, chosen from the CPU.

Debian's OpenBLAS 0.3.21 does not recognise every virtualised CPU and then
runs its generic "Prescott" kernels (23 GFLOP/s on one core of an AVX-512
Xeon, against 149 with SkylakeX). OPENBLAS_CORETYPE names the kernels:
SkylakeX where /proc/cpuinfo has avx512f, Zen on other AMD CPUs, Haswell
otherwise. OPENBLAS_NUM_THREADS=1 keeps OpenBLAS's thread pool from fighting
PyTorch's over the cores. Both must be set before OpenBLAS is loaded;
values already in the environment are kept. OPENBLAS_VERBOSE=2 makes
OpenBLAS print the core it chose.

    import openblas_env; openblas_env.setdefault(os.environ)   # before import torch
    env = openblas_env.setdefault(dict(os.environ))             # for a child process
    python3 bench/openblas_env.py                               # prints the choice, as shell
"""
import os


def coretype(cpuinfo="/proc/cpuinfo"):
    """Returns the OPENBLAS_CORETYPE for this CPU."""
    try:
        with open(cpuinfo) as f:
            text = f.read()
    except OSError:
        return "Haswell"
    flags, vendor = set(), ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "flags" and not flags:
            flags = set(value.split())
        elif key == "vendor_id" and not vendor:
            vendor = value.strip()
    if "avx512f" in flags:
        return "SkylakeX"
    if vendor == "AuthenticAMD":
        return "Zen"
    return "Haswell"


def setdefault(env):
    """Sets OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS=1 in env unless set; returns env."""
    env.setdefault("OPENBLAS_CORETYPE", coretype())
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


if __name__ == "__main__":
    env = setdefault({k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_")})
    for k in sorted(env):
        print(f"export {k}={env[k]}")
