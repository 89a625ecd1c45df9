"""``harness env``: what a bug report needs about the machine: versions, devices, CPU features (bf16 native or
emulated), from :mod:`harness.provenance` (versions, machine, ``lscpu``) and :mod:`harness.training.precision` (bf16)."""

from __future__ import annotations

import os
from typing import Any

from harness.extras import extra_packages
from harness.provenance import cpu_details, lscpu, machine, machine_load, package_versions
from harness.training.precision import device_type, native_bf16, resolve

#: the distribution this package is installed as
DISTRIBUTION = "het-harness"
#: the packages whose versions a report gives: the ones training and transfer run on ...
PACKAGES = (DISTRIBUTION, "torch", "torchvision", "timm", "accelerate", "numpy")
#: CPU instruction-set flags (``lscpu``) that decide the speed of fp32 and bf16 kernels
CPU_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
#: environment variables that change threads, devices or downloads
VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "HF_HUB_OFFLINE",
    "HF_HOME",
    "TORCH_HOME",
    "TFDS_DATA_DIR",
)
#: every set environment variable with this prefix is listed too: they change where the harness reads and writes
#: (e.g. HARNESS_CACHE)
HARNESS_PREFIX = "HARNESS_"


def _cuda() -> "dict[str, Any]":
    """CUDA as torch sees it: whether it is available, the CUDA version torch was built with, and each device's
    name, memory (GiB), compute capability and native bf16."""
    import torch

    out: "dict[str, Any]" = {"available": torch.cuda.is_available(), "built_with": torch.version.cuda, "devices": []}
    for i in range(torch.cuda.device_count() if out["available"] else 0):
        p = torch.cuda.get_device_properties(i)
        with torch.cuda.device(i):
            bf16 = bool(torch.cuda.is_bf16_supported())
        out["devices"].append(
            {
                "index": i,
                "name": p.name,
                "memory_gib": round(p.total_memory / 2**30, 1),
                "capability": f"{p.major}.{p.minor}",
                "bf16": "native" if bf16 else "emulated",
            }
        )
    return out


def environment() -> "dict[str, Any]":
    """Versions, machine, CPU features, bf16 and devices of this process, as JSON-ready values.

    Keys: ``versions`` (python and :data:`PACKAGES`), ``optional`` (each extra's packages, read from the installed
    metadata by :func:`harness.extras.extra_packages`: ``{extra: {package: version or "not installed"}}``), ``machine`` (:func:`harness.provenance.machine`: platform, cpu, cores, memory, gpu), ``cpu``
    (``lscpu``'s model line, the cores this process may use, torch's threads and kernel level, each of
    :data:`CPU_FLAGS`), ``bf16`` (on the CPU: native or emulated; what ``train.mixed_precision=auto`` becomes on
    the training device), ``cuda`` (:func:`_cuda`), ``load`` (:func:`harness.provenance.machine_load`) and
    ``variables`` (those of :data:`VARIABLES` that are set, then every set ``HARNESS_*`` variable).
    """
    import torch

    flags = set(lscpu().get("Flags", "").split())
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    train_on = device_type()
    return {
        "versions": package_versions(PACKAGES),
        "optional": extra_packages(),
        "machine": machine(),
        "cpu": {
            "lscpu": cpu_details(),
            "usable_cores": usable,
            "torch_threads": torch.get_num_threads(),
            "torch_kernels": torch.backends.cpu.get_cpu_capability(),
            "flags": {f: f in flags for f in CPU_FLAGS} if flags else {},
        },
        "bf16": {
            "cpu": "native" if native_bf16("cpu") else "emulated",
            "training_device": train_on,
            "mixed_precision_auto": resolve("auto", train_on),
        },
        "cuda": _cuda(),
        "load": machine_load(),
        "variables": {
            **{v: os.environ[v] for v in VARIABLES if v in os.environ},
            **{k: x for k, x in sorted(os.environ.items()) if k.startswith(HARNESS_PREFIX)},
        },
    }


def describe(env: "dict[str, Any]") -> str:
    """:func:`environment` as the lines ``harness env`` prints."""
    v, m, cpu, bf16, cuda = env["versions"], env["machine"], env["cpu"], env["bf16"], env["cuda"]
    flags = cpu["flags"]
    lines = [
        f"{DISTRIBUTION} {v[DISTRIBUTION]}, Python {v['python']} on {m['platform']}",
        "versions: " + ", ".join(f"{k} {x}" for k, x in v.items() if k not in ("python", DISTRIBUTION)),
        "optional: "
        + (
            "; ".join(
                f"[{e}] " + ", ".join(f"{k} {x}" for k, x in pkgs.items())
                for e, pkgs in env["optional"].items()
                if pkgs
            )
            or "no extras (the distribution's metadata is not installed)"
        ),
        f"CPU: {cpu['lscpu'] or m['cpu']}",
        f"cores: {m['cores']} ({cpu['usable_cores']} usable by this process, torch uses {cpu['torch_threads']} "
        f"threads); memory {m.get('memory', '?')}; load average "
        + ", ".join(f"{x:.1f}" for x in env["load"]["load_average"]),
        "CPU features: "
        + (", ".join(f"{f} {'yes' if on else 'no'}" for f, on in flags.items()) if flags else "unknown (no lscpu)")
        + f"; torch's CPU kernels: {cpu['torch_kernels']}",
        f"bf16 on the CPU: {bf16['cpu']}"
        + ("" if bf16["cpu"] == "native" else " (no AVX512-BF16 or AMX: oneDNN emulates it, slower than fp32)"),
        f"training device: {bf16['training_device']}; train.mixed_precision=auto trains in "
        f"{'fp32' if bf16['mixed_precision_auto'] == 'no' else bf16['mixed_precision_auto']} here",
    ]
    if cuda["devices"]:
        lines += [
            f"CUDA {cuda['built_with']}: "
            + "; ".join(
                f"{d['index']}: {d['name']} ({d['memory_gib']} GiB, compute {d['capability']}, bf16 {d['bf16']})"
                for d in cuda["devices"]
            )
        ]
    else:
        lines += [
            f"CUDA: no device (torch built with CUDA {cuda['built_with']})"
            if cuda["built_with"]
            else "CUDA: no device (a CPU-only torch)"
        ]
    lines += [
        "environment: "
        + (
            ", ".join(f"{k}={x}" for k, x in env["variables"].items())
            or f"none of {', '.join(VARIABLES)}, {HARNESS_PREFIX}* set"
        )
    ]
    return "\n".join(lines)
