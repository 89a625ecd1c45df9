"""Bad inputs found by the twelfth reliability audit in an upstream run's data and path settings (``audit12 <case
id>``): a held-out or evaluation split that is another role's split, a held-out split the data lacks (found only
after training), and path settings with a ``~``, a ``$`` or a control character. Every refusal comes before any
work."""

from __future__ import annotations

import os
from unittest import mock

import numpy as np
from bad_inputs_audit9_config import CLI_ERROR, CONFIGS, _upstream
from PIL import Image

from bad_inputs import bad_input, handled


# ------------------------------------------------------------------------------ A12-01: one split in two roles
@bad_input(
    "upstream",
    "data.heldout_split=test, the evaluation split (audit12 A12-01: the temperature was fitted on the test images "
    "and reported as held-out calibration)",
    CLI_ERROR,
    r"data\.heldout_split=test is also data\.eval_split: .*evaluation images, not held out: give a split of its own "
    r"\(digits: val; .*or data\.heldout_split=null",
)
def _heldout_is_eval(tmp):
    _upstream(tmp, "data.heldout_split=test")


@bad_input(
    "upstream",
    "data.heldout_split=train, the training split (audit12 A12-01: the held-out predictions were the training images)",
    CLI_ERROR,
    r"data\.heldout_split=train is also data\.train_split: .*training images, not held out.*data\.heldout_split=null",
)
def _heldout_is_train(tmp):
    _upstream(tmp, "data.heldout_split=train")


@bad_input(
    "upstream",
    "data.eval_split=train, the training split (audit12 A12-01, A12-11: training accuracy reported as test accuracy, "
    "and the evaluated split cut by limit_train)",
    CLI_ERROR,
    r"data\.eval_split=train is also data\.train_split: .*training accuracy reported as test accuracy.*digits: test",
)
def _eval_is_train(tmp):
    _upstream(tmp, "data.eval_split=train")


@handled(
    "data",
    "build_split of the evaluated split where it is also the training split (audit12 A12-11: harness import "
    "eval_split=train limit_eval=30 predicted the whole training split, limit_train was taken)",
    r"limit_eval=30 read",
)
def _limit_by_role(tmp):
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    data = DataConfig(eval_split="train", limit_eval=30, limit_train=100)
    assert len(build_split(data, "train")) == 30
    return "limit_eval=30 read for the evaluated split train: 30 examples"


# ------------------------------------------------------------------------------ A12-03: held-out split missing
@bad_input(
    "upstream",
    "an image folder without val/ and digits_base's data.heldout_split=val (audit12 A12-03: refused only after the "
    "whole training epoch, naming neither the key nor the fix)",
    (CLI_ERROR, FileNotFoundError),
    r"data\.heldout_split=val: .*no split folder .*val.*give a split the data has, or data\.heldout_split=null",
)
def _heldout_folder_missing(tmp):
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for cls in ("a", "b"):
            folder = tmp / "imgs" / split / cls
            folder.mkdir(parents=True)
            for i in range(4):
                Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    from harness.cli import main

    overrides = [f"data.path={tmp / 'imgs'}", "data.image_size=16", "data.batch_size=4", f"output_dir={tmp / 'r'}"]
    overrides.append("data.eval_resize=null")  # digits_base's eval_resize=32 is for its image_size=32 (A16-02's rule)
    try:
        main(
            ["upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), "train.epochs=1"]
            + ["train.log_with=[]", "data.source=image_folder", *overrides],
            standalone_mode=False,
        )
    finally:  # the lock may make the run folder; nothing of a run is written in it
        made = {p.name for p in (tmp / "r").iterdir()} if (tmp / "r").exists() else set()
        assert not made & {"checkpoints", "metrics.jsonl", "config.yaml", "run.json"}, f"work started: {made}"


# ------------------------------------------------------------------------------ A12-10, A12-13: path settings
@handled(
    "upstream",
    "data.cache_dir='~/audit12_hc', model.pretrained_file='~/w.pt' (audit12 A12-10: config.yaml kept the ~, and "
    "harness shift made a folder literally named ~ in the current folder)",
    r"~ expanded",
)
def _cache_dir_home(tmp):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig, validate

    (tmp / "home").mkdir()
    (tmp / "home" / "w.pt").write_bytes(b"")  # the weights file validate checks is there (not read here)
    with mock.patch.dict(os.environ, {"HOME": str(tmp / "home")}):
        cfg = load_config(
            UpstreamConfig,
            CONFIGS / "digits_hom.yaml",
            ["data.cache_dir=~/audit12_hc", "model.pretrained_file=~/w.pt", f"output_dir={tmp / 'r'}"],
        )
        validate(cfg)
        home = os.path.expanduser("~")
    assert cfg.data.cache_dir == os.path.join(home, "audit12_hc"), cfg.data.cache_dir
    assert cfg.model.pretrained_file == os.path.join(home, "w.pt"), cfg.model.pretrained_file
    return f"~ expanded: data.cache_dir={cfg.data.cache_dir}"


@bad_input(
    "upstream",
    "data.cache_dir='$HOME/x' (audit12 A12-10: a folder literally named $HOME would be made)",
    CLI_ERROR,
    r"data\.cache_dir='\$HOME/x' holds a \$: .*write the folder out",
)
def _cache_dir_dollar(tmp):
    _upstream(tmp, "data.cache_dir=$HOME/x")


@bad_input(
    "upstream",
    'output_dir: "runs/a\\tb" in a YAML file (audit12 A12-13: a control character in a path setting kept in the '
    "folder name, or a newline silently made a space)",
    CLI_ERROR,
    r"output_dir '.*a\\tb' holds the control character '\\t': a path setting cannot hold one .*remove it",
)
def _control_in_output_dir(tmp):
    from harness.cli import main

    (tmp / "c.yaml").write_text(f'base: {CONFIGS / "digits_hom.yaml"}\noutput_dir: "{tmp}/a\\tb"\n')
    try:
        main(["upstream", "--no-progress", "--config", str(tmp / "c.yaml"), "train.epochs=1"], standalone_mode=False)
    finally:
        assert not [p for p in tmp.iterdir() if p.name.startswith("a")], "work started before the error"
