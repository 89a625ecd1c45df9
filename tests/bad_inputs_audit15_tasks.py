"""Bad inputs found by the fifteenth reliability audit in the transfer tasks (``audit15 <case id>``): a folder-format
task whose split list reaches images through a symbolic link out of the task folder. Every refusal comes before any
work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from bad_inputs_audit12_tasks import _refused_before_work
from PIL import Image

from bad_inputs import bad_input, handled
from bad_inputs_downstream import CLI_ERROR, _upstream, task_folder


# ------------------------------------------------------------------------------ A15-02: a link out of the task folder
def _linked_task(tmp: Path) -> Path:
    """The audit's task: :func:`task_folder` ``birds/`` whose test list is 12 lines ``lnk/<i>.png <i % 5>``, where
    ``birds/lnk`` is a symbolic link to ``outside/``, a folder beside the task folder holding 12 PNGs."""
    folder = task_folder(tmp)
    (tmp / "outside").mkdir()
    rng = np.random.default_rng(1)
    for i in range(12):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(tmp / "outside" / f"{i}.png")
    (folder / "lnk").symlink_to(tmp / "outside", target_is_directory=True)
    (folder / "test.txt").write_text("".join(f"lnk/{i}.png {i % 5}\n" for i in range(12)))
    return folder


_LINK_MESSAGE = (
    r"birds/test\.txt line 1: '.*birds/lnk' is a link to '.*/outside', outside the task folder .*birds, so image "
    r"'lnk/0\.png' would be read from there; copy the images under the task folder \(or replace the link by one to a "
    r"folder under it\), or pass --allow-outside-paths \(SweepSettings\.allow_outside_paths=True\) if the folder is "
    r"yours and the link is meant to point elsewhere"
)


@bad_input(
    "downstream",
    "a custom task whose test list names lnk/<i>.png, lnk a symbolic link to a folder outside the task folder (audit15 "
    "A15-02: the images were read through the link without a word, although --allow-outside-paths was not given)",
    CLI_ERROR,
    _LINK_MESSAGE,
)
def _downstream_list_through_link(tmp):
    _refused_before_work(tmp, "--tasks", f"birds={_linked_task(tmp)}:5")


@bad_input(
    "fewshot",
    "harness fewshot on a custom task whose test list reaches images through a link out of the task folder (audit15 "
    "A15-02: the few-shot probe scored the images read through the link)",
    CLI_ERROR,
    _LINK_MESSAGE,
)
def _fewshot_list_through_link(tmp):
    from click.testing import CliRunner

    from harness.cli import main

    try:
        CliRunner().invoke(
            main,
            ["fewshot", "--model", _upstream(), "--tasks", f"birds={_linked_task(tmp)}:5", "--shots", "1"]
            + ["--log-with", "none", "--out", str(tmp / "fs")],
            standalone_mode=False,
            catch_exceptions=False,
        )
    finally:
        assert not (tmp / "fs").exists(), "written before the refusal"


@handled(
    "downstream",
    "the same link out of the task folder with --allow-outside-paths (audit15 A15-02: the user's consent reads it)",
    r"--allow-outside-paths: the 12 test images are read through the link",
)
def _list_through_link_allowed(tmp):
    from harness.tasks.taskset import TaskData, check_tasks, custom_task, load_split

    folder = _linked_task(tmp)
    task = custom_task(f"birds={folder}:5")
    check_tasks([task], TaskData(allow_outside_paths=True))  # the stage check of downstream, fewshot and experiments
    test = load_split(task, "test", TaskData(allow_outside_paths=True))
    assert len(test) == 12 and test.load_image.paths[0] == str(folder / "lnk" / "0.png")
    assert np.array_equal(np.asarray(test[0][0]), np.asarray(Image.open(tmp / "outside" / "0.png").convert("RGB")))
    return "--allow-outside-paths: the 12 test images are read through the link"
