"""Bad inputs found by the twenty-second reliability audit in the data's records (``audit22 <case id>``): a run's
relative data.path read from another working folder, an imported run's model.pt replaced, and a pack's data config
file blamed as "the defaults"."""

from __future__ import annotations

import os

from bad_inputs_audit9_config import CLI_ERROR
from bad_inputs_audit21_data import _IMF, _VIEW, _image_folder, _train

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli


# ------------------------------------------------------------------------ A22-02: a relative data.path from elsewhere
@bad_input(
    "import",
    "harness import --model ../runs/imf/model.pt (a run trained with data.path=imf, relative) from a sub-folder, --data "
    "an image folder config of the same folder by its absolute path with eval_split=train (audit22 A22-02: rc 0, top1 "
    "0.5 on the 12 images the model trained on: the run's data.path was resolved against the current folder)",
    CLI_ERROR,
    r"runs/imf/model\.pt was trained on the train split of image_folder at .*imf/train \(as its run's "
    r".*runs/imf/config\.yaml records\): data\.eval_split=train is also data\.train_split",
)
def _relative_data_path_from_another_folder(tmp):
    _image_folder(tmp / "imf")
    _train("runs/imf", *_IMF)
    (tmp / "sub").mkdir()
    os.chdir(tmp / "sub")  # the test's monkeypatch puts the working folder back
    (tmp / "sub" / "eabs.yaml").write_text(
        f"data:\n  source: image_folder\n  path: {tmp / 'imf'}\n  eval_split: train\n{_VIEW}"
    )
    _cli("import", "--model", "../runs/imf/model.pt", "--data", "eabs.yaml", "--out", "imp_sub")


@bad_input(
    "import",
    "harness import, from a sub-folder, of a model trained on the image folder imf's train split (data.path absolute) "
    "with --data a pack of that split made with path=imf (relative) and eval_split=train (audit22 A22-02: rc 0: the "
    "pack's index.json recorded the packed folder as 'imf', read against the current folder)",
    CLI_ERROR,
    r"runs/imfa/model\.pt was trained on the train split of image_folder at .*imf/train .*\(data\.path=\.\./pkimf "
    r"is a pack of image_folder, as its index\.json records\): data\.eval_split=train is also data\.train_split",
)
def _pack_of_a_relative_folder_from_elsewhere(tmp):
    _image_folder(tmp / "imf")
    _train("runs/imfa", *[o if not o.startswith("data.path=") else f"data.path={tmp / 'imf'}" for o in _IMF])
    _cli("data", "pack", "image_folder", "pkimf", "--shard-size", "10", "--split", "train", "path=imf")
    (tmp / "sub").mkdir()
    os.chdir(tmp / "sub")  # the test's monkeypatch puts the working folder back
    (tmp / "sub" / "epk.yaml").write_text(f"data:\n  source: shards\n  path: ../pkimf\n  eval_split: train\n{_VIEW}")
    _cli("import", "--model", "../runs/imfa/model.pt", "--data", "epk.yaml", "--out", "imp_pk2")


# -------------------------------------------------------------------- A22-03: an imported run's model.pt replaced
@bad_input(
    "import",
    "export_run of an imported run folder (harness import's --out) whose model.pt was replaced by another model's "
    "(audit22 A22-03: the import recorded no weights_sha256, so the export published the import's accuracy over the "
    "other weights, and harness shift measured them beside the import's predictions)",
    ValueError,
    r"impx/model\.pt is not the model the run's metrics\.json and predictions measured .*put the run's own model\.pt "
    r"back",
)
def _replaced_model_in_an_import(tmp):
    import shutil

    import torch

    from harness.models import build_model, save_model
    from harness.runs import export_run

    for seed in (0, 1):
        torch.manual_seed(seed)
        model = build_model(dict(backbone="test_resnet", num_classes=10, head={"covariance": "none"}))
        save_model(model.eval(), tmp / f"m{seed}.pt")
    (tmp / "etest.yaml").write_text("data:\n  source: digits\n  eval_split: test\n  heldout_split: null\n")
    _cli("import", "--model", "m0.pt", "--data", "etest.yaml", "--out", "imp")
    export_run(tmp / "imp", tmp / "exp_ok")  # its own model: exported
    shutil.copytree(tmp / "imp", tmp / "impx", ignore=shutil.ignore_patterns(".lock"))
    shutil.copy(tmp / "m1.pt", tmp / "impx" / "model.pt")
    export_run(tmp / "impx", tmp / "expx")


# ------------------------------------------------------------------------ A22-06: a pack's data config file named
@bad_input(
    "data",
    "harness data pack dfl2.yaml (a data config whose data section sets limit_eval: 1.5) pkfl2 --split val (audit22 "
    "A22-06: the type error was blamed on 'the defaults', not the file that set it)",
    CLI_ERROR,
    r"invalid config \(the data section of dfl2\.yaml\): limit_eval: .*give a whole number",
)
def _pack_config_file_named(tmp):
    (tmp / "dfl2.yaml").write_text("data:\n  source: digits\n  limit_eval: 1.5\n")
    _cli("data", "pack", "dfl2.yaml", "pkfl2", "--shard-size", "100", "--split", "val")


# ------------------------------------------------------------------ A22-11: an output folder inside a split it reads
@bad_input(
    "upstream",
    "harness upstream data.source=image_folder data.path=imf output_dir=imf/test/run1, inside the test split it reads "
    "(audit22 A22-11: the run made imf/test/run1 first, then refused its own data: 'class folder(s) of split test hold "
    "no image: imf/test/run1; add images', and every later run on imf the same)",
    CLI_ERROR,
    r"output_dir=imf/test/run1 is inside the data's test split \(data\.path=imf\) .*give output_dir a folder outside "
    r"it",
)
def _output_dir_inside_a_split(tmp):
    import pytest

    _image_folder(tmp / "imf")
    (tmp / "eout.yaml").write_text(f"data:\n  source: image_folder\n  path: imf\n  eval_split: test\n{_VIEW}")
    with pytest.raises(CLI_ERROR, match=r"--out imf/test/imp is inside the data's test split \(data\.path=imf\)"):
        _cli("import", "--model", "m.pt", "--data", "eout.yaml", "--out", "imf/test/imp")
    try:
        _train("imf/test/run1", *_IMF)
    finally:
        assert not (tmp / "imf" / "test" / "run1").exists() and not (tmp / "imf" / "test" / "imp").exists()
