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


def native_bf16(device_type: str = "cpu") -> bool:
    """True if ``device_type`` (``cpu``, ``cuda``, ...) computes bf16 natively: for CUDA,
    ``torch.cuda.is_bf16_supported()``; for a CPU,
    ``torch.cpu._is_avx512_bf16_supported()`` or ``torch.cpu._is_amx_tile_supported()`` (the CPU
    instructions AVX512-BF16 or AMX; oneDNN's own bf16 check also accepts plain AVX512, where bf16 is
    emulated); other devices (TPU/XLA, MPS) are taken to have it."""
    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device_type == "cpu":
        try:
            return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
        except (AttributeError, RuntimeError):  # an older torch without these checks
            return False
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
