"""Bad inputs found by the twenty-fifth reliability audit in moved folders, stored OOD sets and exports
(``audit25 <case id>``): a moved project's ensemble and import folders, ``harness moved-data`` given a folder it does
not handle, an OOD set stored under its spec's text, and a run's model.pt re-saved with other preprocessing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bad_inputs_audit22_runs import _image_folder_run

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli


# ------------------------------------------------------------------------------ A25-10: other preprocessing
@bad_input(
    "export",
    "harness.runs.export_run of a run whose model.pt was re-saved (a user's script) with the same weights and other "
    "input preprocessing (ImageNet's mean / std) (audit25 A25-10: rc 0, the export's card stated the run's metrics, "
    "measured with the harness's own normalisation)",
    ValueError,
    r"^runs/imf/model\.pt normalises its input otherwise than the model the run's metrics\.json and predictions "
    r"measured \(its config's preprocessing: mean None -> \[0\.485, 0\.456, 0\.406\], std None -> "
    r"\[0\.229, 0\.224, 0\.225\]; audit25 A25-10\): its metrics do not hold for it; put the run's own model\.pt back, "
    r"or save it again with the preprocessing it was measured with \(model\.config\.preprocessing = \{\}\), or train "
    r"the run again \(harness upstream with its config\.yaml\)$",
)
def _resaved_preprocessing(tmp):
    import torch

    from harness.models import load_model, save_model
    from harness.runs import export_run

    _image_folder_run(tmp)
    extra = torch.load(tmp / "runs/imf/model.pt", weights_only=True)["extra"]
    model = load_model(tmp / "runs/imf/model.pt")
    model.config.preprocessing.update({"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]})
    save_model(model, tmp / "runs/imf/model.pt", extra=extra)
    export_run("runs/imf", tmp / "ex")


# ------------------------------------------------------------------------------ A25-06: a stored OOD set's images
def _ood_images(folder: Path, seed: int) -> None:
    """``folder/test/{a,b}/{0..3}.png``: 16x16 random images of ``seed`` (written over any there)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for c in "ab":
        (folder / "test" / c).mkdir(parents=True, exist_ok=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(folder / "test" / c / f"{i}.png")


def _shift_far(run: str) -> "tuple[str, Any]":
    """``harness shift -m RUN --corruptions none --ood far:source=image_folder,path=oodf,split=test``: ``(what it
    printed, the stored far set's logits)``."""
    import contextlib
    import io

    from harness.shift.store import load_set

    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        _cli("shift", "-m", run, "--corruptions", "none", "--ood", "far:source=image_folder,path=oodf,split=test")
    return said.getvalue(), load_set(Path(run) / "shift" / "ood-far")[0].logits.copy()


@handled(
    "shift",
    "harness shift --ood far:source=image_folder,path=oodf,split=test of a run, again after oodf's images were "
    "replaced, and again from another working folder whose oodf holds other images (audit25 A25-06: rc 0, the stored "
    "set of the first images reused by the text of its spec, its AUROC reported for the new ones)",
    r"^ood-far: the files of \S+/oodf/test changed since its stored set was predicted: predicting it again; "
    r"ood-far: its spec now names \S+/other/oodf/test, its stored set was of \S+/oodf/test: predicting it again$",
)
def _ood_set_of_other_images(tmp):
    import numpy as np

    _image_folder_run(tmp)
    _ood_images(tmp / "oodf", 1)
    _, first = _shift_far("runs/imf")
    _ood_images(tmp / "oodf", 2)  # the same names, other images
    said, replaced = _shift_far("runs/imf")
    assert not np.allclose(first, replaced), "the stored set of the earlier images was reused"
    _, again = _shift_far("runs/imf")
    assert np.array_equal(again, replaced)  # unchanged images: the stored set is kept
    (tmp / "other").mkdir()
    os.chdir(tmp / "other")
    _ood_images(tmp / "other" / "oodf", 3)
    said2, other = _shift_far("../runs/imf")
    assert not np.allclose(other, replaced), "the stored set of another folder's images was reused"
    lines = [line.split(": ", 1)[1] for line in (said + said2).splitlines() if "predicting it again" in line]
    return "; ".join(lines)
