"""Which mixed precision to train and predict in: ``auto`` resolved for the device at hand.

bf16 autocast is fast only where the hardware computes bf16: on a CPU with AVX512-BF16 or AMX
(recent Xeons, AMD Zen 4) a bf16 matmul runs several times faster than fp32, but on a CPU without
them (AVX2 only, e.g. AMD EPYC Zen 3) oneDNN emulates bf16 and a training step of a 32 px ResNet
ran 10-50x *slower* than in fp32 (``harness bench upstream`` measures both on the machine at
hand). ``auto`` therefore means bf16 where it is native and fp32 elsewhere.

Lightning's spellings of its ``Trainer(precision=...)`` are accepted as aliases (:data:`ALIASES`, read by
:func:`canonical`): ``bf16-mixed`` is ``bf16``, ``16-mixed`` (and the legacy ``16``) is ``fp16``, ``32-true`` and
``32`` are ``no``.
"""

from __future__ import annotations

import torch

CHOICES = ("no", "fp16", "bf16", "auto")

#: Lightning's names of the mixed precisions (``Trainer(precision=...)``) -> the setting they mean here
ALIASES = {"bf16-mixed": "bf16", "16-mixed": "fp16", "16": "fp16", "32-true": "no", "32": "no"}

#: every value a mixed precision setting accepts: :data:`CHOICES`, then :data:`ALIASES`
ACCEPTED = CHOICES + tuple(ALIASES)


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


def canonical(setting: "str | int", key: "str | None" = None) -> str:
    """The setting among :data:`CHOICES` that ``setting`` names: itself, or the one a Lightning alias
    (:data:`ALIASES`) stands for; a whole number (``32`` read from YAML) is read as its string, and false (YAML 1.1's
    reading of ``no`` and ``off``, a bool or the string OmegaConf makes of it) as ``no``. ``key`` names the setting in
    messages. :func:`resolve` calls it; a validator of a mixed precision setting calls it and keeps what
    it returns, so records and run names hold the canonical setting.

    Raises:
        ValueError: a value outside :data:`ACCEPTED` (true: YAML's yes / on); Lightning's ``bf16-true`` / ``16-true`` / ``64-true`` (the
            whole model cast, not autocast) say so and name the mixed setting to use.
    """
    name = str(setting) if isinstance(setting, int) and not isinstance(setting, bool) else setting
    if name is False or name in ("False", "false"):  # YAML 1.1 reads no / off / false as the switch false
        return "no"
    where = f" ({key})" if key else ""
    if name is True or name in ("True", "true"):
        raise ValueError(
            f"mixed precision {setting!r}{where} is YAML's reading of yes / on / true, which names no precision: "
            f"give one of {', '.join(c for c in CHOICES if c != 'no')} (quoted where YAML would read a switch)"
        )
    if name in CHOICES:
        return name
    if isinstance(name, str) and name in ALIASES:
        return ALIASES[name]
    if name in ("bf16-true", "16-true", "64-true", "transformer-engine", "transformer-engine-float16"):
        raise ValueError(
            f"mixed precision {setting!r}{where} is Lightning's whole-model cast, which this harness does not "
            "train in: use bf16 or fp16 (autocast; Lightning's bf16-mixed / 16-mixed), or no"
        )
    raise ValueError(
        f"unknown mixed precision {setting!r}{where}: use one of {', '.join(CHOICES)} "
        f"(or Lightning's {', '.join(ALIASES)})"
    )


def resolve(setting: str, device_type: str = "cpu", key: "str | None" = None) -> str:
    """The precision to use for ``setting`` (``train.mixed_precision``, ``--mixed-precision``) on ``device_type``:
    a Lightning alias becomes its setting (:func:`canonical`); ``auto`` becomes ``bf16`` where :func:`native_bf16`
    holds, else ``no`` (fp32); other values are returned as they are. The one home of the precision rules of every
    stage; ``key`` names the setting in messages.

    Raises:
        ValueError: a value outside :data:`ACCEPTED` (:func:`canonical`); ``fp16`` on a CPU (autocast has no fp16
            training path there and accelerate silently trains in fp32: use bf16 or no).
    """
    setting = canonical(setting, key)
    if setting == "fp16" and device_type == "cpu":
        raise ValueError(
            f"{key or 'mixed precision'}=fp16 does not run on a CPU (accelerate silently trains in fp32 there): use bf16 or no on CPUs"
        )
    if setting == "auto":
        return "bf16" if native_bf16(device_type) else "no"
    return setting


def check_device(device: str) -> None:
    """Refuse a device this machine cannot run on (before any work).

    Raises:
        ValueError: not ``cpu`` / ``cuda`` / ``cuda:N``; CUDA asked for without a usable GPU, or a GPU
            index beyond the GPUs visible (the message names the fix).
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"unknown device {device!r} (--device): use cpu, cuda or cuda:N") from e
    if dev.type == "cpu":
        return
    if dev.type != "cuda":
        raise ValueError(f"device {device!r} (--device): the harness runs on cpu, cuda or cuda:N; use one of them")
    if not torch.cuda.is_available():
        build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
        raise ValueError(
            f"--device {device}: no CUDA GPU is usable on this machine (torch.cuda.is_available() is "
            f"False; torch {torch.__version__} is {build}); use --device cpu, or run where nvidia-smi "
            "shows a GPU (and CUDA_VISIBLE_DEVICES does not hide it)"
        )
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(
            f"--device {device}: only {torch.cuda.device_count()} GPU(s) are visible; use cuda:0 .. "
            f"cuda:{torch.cuda.device_count() - 1}"
        )
