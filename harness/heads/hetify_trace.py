"""Which layer's output is a model's output, found by a traced forward pass (:func:`output_producer`): the layer
:func:`harness.heads.hetify.hetify` replaces when none is named, and the check that a named one ends the model."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

#: what hetify replaces, for the messages
SUPPORTED = "nn.Linear, a 1x1 nn.Conv2d on pooled features, timm's NormLinear (its linear) or an nn.ModuleList of these"
FIX = "name the output layer yourself: hetify(model, layer='<dotted name>') (a name or a list of names)"


def is_conv_1x1(module: nn.Module) -> bool:
    return isinstance(module, nn.Conv2d) and module.kernel_size == (1, 1)


def shapes(example_input) -> str:
    """``of shape (2, 9)`` (a tensor), ``of shapes ((2, 9), 'x')`` (a tuple of arguments), else its type."""
    if isinstance(example_input, Tensor):
        return f"of shape {tuple(example_input.shape)}"
    if isinstance(example_input, tuple):
        parts = [tuple(a.shape) if isinstance(a, Tensor) else type(a).__name__ for a in example_input]
        return f"of shapes ({', '.join(map(str, parts))})"
    return f"(a {type(example_input).__name__})"


def output_producer(model: nn.Module, example_input) -> "Optional[tuple[str, nn.Module]]":
    """The ``(dotted name, module)`` whose output is the model's output, in an ``eval()``, ``no_grad`` forward of
    ``example_input`` (the training flags are restored); None if no module returns it (the forward function
    computes it, e.g. the mean of two heads).

    "Is the output": the same tensor, or the same memory with the same number of elements (a view, as
    ``torch.flatten`` of a ``[B, K, 1, 1]`` convolution output). Every module's output is kept alive during
    the pass, so no address is reused. The producer is the last leaf module to return it (an in-place ReLU
    after a layer returns the same tensor and wins, rightly), else the first non-leaf one.

    Raises:
        ValueError: the forward of ``example_input`` fails (its shape and the model's error named) or returns no
            single tensor.
    """
    fired: "list[tuple[str, nn.Module, Tensor]]" = []

    def record(name):
        def hook(module, args, output):
            if isinstance(output, Tensor):
                fired.append((name, module, output))

        return hook

    modes = {m: m.training for m in model.modules()}
    handles = [m.register_forward_hook(record(n)) for n, m in model.named_modules() if n]
    try:
        model.eval()
        with torch.no_grad():
            out = model(*example_input) if isinstance(example_input, tuple) else model(example_input)
    except Exception as e:  # noqa: BLE001 - any failure of the user's forward: say it was example_input's
        raise ValueError(
            f"example_input {shapes(example_input)} does not fit {type(model).__name__}: its forward raised "
            f"{type(e).__name__}: {' '.join(str(e).split())}; pass example_input=<a batch the model accepts> (the "
            f"shape its first layer takes), or {FIX}"
        ) from e
    finally:
        for handle in handles:
            handle.remove()
        for m, mode in modes.items():
            m.training = mode
    if not isinstance(out, Tensor):
        raise ValueError(
            f"{type(model).__name__}(example_input) returned {type(out).__name__}, not one tensor: which output is "
            f"the classification is ambiguous; {FIX}"
        )

    def same(t: Tensor) -> bool:
        return t is out or (t.device == out.device and t.data_ptr() == out.data_ptr() and t.numel() == out.numel())

    matches = [(n, m) for n, m, t in fired if same(t)]
    leaves = [(n, m) for n, m in matches if next(m.children(), None) is None]
    return leaves[-1] if leaves else matches[0] if matches else None


def traced_output_layer(model: nn.Module, example_input) -> str:
    """The dotted name of the layer whose output is the model's output (:func:`output_producer`).

    Raises:
        ValueError: the forward of ``example_input`` fails (its shape and the model's error named), returns no
            single tensor, or no supported layer produces its output.
    """
    found = output_producer(model, example_input)
    if found is None:
        raise ValueError(
            f"no module of {type(model).__name__} returns its output: the forward function computes it after the "
            f"last module; if a layer before that is the classifier and replacing it is right, {FIX}"
        )
    name, producer = found
    if isinstance(producer, nn.Linear) or is_conv_1x1(producer):
        return name
    raise ValueError(
        f"the output of {type(model).__name__} comes from {name!r} ({type(producer).__name__}), not from a layer "
        f"hetify replaces ({SUPPORTED}); a HET head returns log-probabilities, so what the model does after its "
        "classifier (a ReLU and pooling, as torchvision's SqueezeNet) would act on them: rebuild the classifier as "
        f"a layer that ends the model, or if replacing a layer before is right, {FIX}"
    )


def probe_input(model: nn.Module) -> "Optional[Tensor]":
    """A batch of one zero row for a model whose first registered leaf module is an ``nn.Linear`` (its input size
    is then known), on that layer's device and dtype; None for any other model (its input is not known here)."""
    first = next((m for m in model.modules() if next(m.children(), None) is None), None)
    if not isinstance(first, nn.Linear) or first.weight.is_meta:
        return None
    return torch.zeros(1, first.in_features, device=first.weight.device, dtype=first.weight.dtype)


def check_named_output(model: nn.Module, layers: "list[tuple[str, nn.Module]]", example_input) -> None:
    """With ``layer=`` named: refuse when a traced forward shows the model's output comes from another module than
    the named layer(s) (a hidden layer named: the model would transform the head's log-probabilities). Traced with
    ``example_input``, else with :func:`probe_input` (a model starting with an ``nn.Linear``; a probe the forward
    fails on is not judged). An output no module returns is refused for one named layer (forward() transforms it:
    ``torch.sigmoid(self.fc(x))``) and allowed for several (the mean of two heads).

    Raises:
        ValueError: the output comes from another module (both named, and the fixes), or from no module with one
            layer named; an ``example_input`` the forward fails on (:func:`output_producer`).
    """
    probe = example_input if example_input is not None else probe_input(model)
    if probe is None:
        return
    try:
        found = output_producer(model, probe)
    except ValueError:
        if example_input is not None:
            raise
        return
    given = ", ".join(repr(n) for n, _ in layers)
    if found is None and len(layers) == 1:
        raise ValueError(
            f"layer={given} is not the model's output: in a forward of an input {shapes(probe)}, forward() of "
            f"{type(model).__name__} computes its output from the output of {given} (a sigmoid, a scale, a division "
            "by a temperature), which would change a HET head's log-probabilities: move that computation out of "
            "forward(), or pass check_output=False if it is meant to act on log-probabilities"
        )
    if found is None or any(found[1] is m for _, m in layers):
        return
    name, producer = found
    better = f"layer={name!r}" if isinstance(producer, nn.Linear) or is_conv_1x1(producer) else "the last layer"
    raise ValueError(
        f"layer={given} is not the model's output layer: in a forward of an input {shapes(probe)} the output of "
        f"{type(model).__name__} comes from {name!r} ({type(producer).__name__}); a HET head returns "
        f"log-probabilities, so the modules after {given} would act on them; name the layer whose output is the "
        f"model's output ({better}), or rebuild the classifier as a layer that ends the model; if the modules after "
        "it are meant to act on log-probabilities, pass check_output=False"
    )
