"""Which mixed precision to train and predict in: ``auto`` resolved for the device at hand.

bf16 autocast is fast only where the hardware computes bf16: on a CPU with AVX512-BF16 or AMX
(recent Xeons, AMD Zen 4) a bf16 matmul runs several times faster than fp32, but on a CPU without
them (AVX2 only, e.g. AMD EPYC Zen 3) oneDNN emulates bf16 and a training step of a 32 px ResNet
ran 10-50x *slower* than in fp32 (``harness bench upstream`` measures both on the machine at
hand). ``auto`` therefore means bf16 where it is native and fp32 elsewhere.
"""

from __future__ import annotations

import torch

CHOICES = ("no", "fp16", "bf16", "auto")


#: CPU flags (``/proc/cpuinfo``) of the instructions that compute bf16: AVX512-BF16 and AMX on x86, BF16 on Arm
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_flags(cpuinfo: "str | None" = None) -> "set[str]":
    """The CPU's feature flags as Linux lists them (the ``flags`` line of ``/proc/cpuinfo`` on x86, ``Features`` on
    Arm); ``cpuinfo`` is that file's text (read when None). An empty set where there is no such file (macOS,
    Windows)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def native_bf16(device_type: str = "cpu", cpuinfo: "str | None" = None) -> bool:
    """True if ``device_type`` (``cpu``, ``cuda``, ...) computes bf16 natively: for CUDA,
    ``torch.cuda.is_bf16_supported()``; for a CPU, one of :data:`BF16_FLAGS` among its flags (:func:`cpu_flags`;
    ``cpuinfo`` as there): the instructions that oneDNN's bf16 kernels use, AVX512-BF16 or AMX on x86 (oneDNN's own
    check also accepts plain AVX512, where bf16 is emulated). A CPU whose flags cannot be read (no
    ``/proc/cpuinfo``) is taken not to have it: ``auto`` then trains in fp32, the safe choice. Other devices
    (TPU/XLA, MPS) are taken to have it."""
    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device_type == "cpu":
        return bool(cpu_flags(cpuinfo) & set(BF16_FLAGS))
    return True


def device_type() -> str:
    """The device type accelerate will train on, found without creating accelerate's state (which
    must be created once, by the ``Accelerator``, for distributed runs): ``cuda``, ``xla`` (torch_xla
    installed), ``mps`` or ``cpu``."""
    import importlib.util

    if torch.cuda.is_available():
        return "cuda"
    if importlib.util.find_spec("torch_xla") is not None:
        return "xla"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def resolve(setting: str, device_type: str = "cpu") -> str:
    """The precision to use for ``train.mixed_precision`` = ``setting`` on ``device_type``: ``auto``
    becomes ``bf16`` where :func:`native_bf16` holds, else ``no`` (fp32); other values are returned
    as they are.

    Raises:
        ValueError: a value outside ``no``, ``fp16``, ``bf16``, ``auto``.
    """
    if setting not in CHOICES:
        raise ValueError(f"unknown mixed precision {setting!r}: use one of {', '.join(CHOICES)}")
    if setting == "auto":
        return "bf16" if native_bf16(device_type) else "no"
    return setting
