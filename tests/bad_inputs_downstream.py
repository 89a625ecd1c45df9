"""Bad inputs of the downstream stage (``harness downstream``: options, task lines, split lists, images, devices).

Every case runs the command as a user would (click's CliRunner, ``standalone_mode=False`` so the
exception itself is checked) on small data written to the temporary working folder.
"""

import atexit
import shutil
import tempfile
from pathlib import Path

import click
import numpy as np
from click.testing import CliRunner
from PIL import Image

from bad_inputs import bad_input

_UPSTREAM: "dict[str, str]" = {}
CLI_ERROR = click.ClickException  # click.BadParameter (a malformed option) is one too


def _upstream() -> str:
    """A tiny upstream checkpoint, built once per process."""
    if "path" not in _UPSTREAM:
        from harness.models import build_model, save_model

        folder = Path(tempfile.mkdtemp(prefix="bad_inputs_downstream_"))
        atexit.register(shutil.rmtree, folder, True)
        model = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none")))
        _UPSTREAM["path"] = str(save_model(model, folder / "model.pt"))
    return _UPSTREAM["path"]


def downstream(*args: str) -> None:
    """``harness downstream ARGS`` on a tiny upstream model and a tiny grid (the exception propagates)."""
    from harness.cli import main

    tiny = ["--lrs", "0.05", "--steps", "1", "--batch-size", "8", "--micro-batch", "8", "--resolution", "32,32"]
    given = {a for a in args if a.startswith("--")}
    defaults = [v for i in range(0, len(tiny), 2) if tiny[i] not in given for v in tiny[i : i + 2]]
    own = [] if "--upstream" in given else ["--upstream", _upstream()]  # an option is given once (audit10 A10-26)
    CliRunner().invoke(
        main,
        ["downstream", *own, *defaults, *args, *([] if "--out" in given else ["--out", "out"])],
        standalone_mode=False,
        catch_exceptions=False,
    )


def task_folder(tmp: Path, name: str = "birds", k: int = 5, sizes=None, bad: "dict[str, str] | None" = None) -> Path:
    """A folder-format task: 3 PNG images and the four lists (``bad``: split -> a last line to add). Line ``i`` of a
    list is image ``i`` of its split (``i % 3``'s pixels: a hard link to it, a file of its own name, since a list names
    each image once) with label ``i % k``; the test split lists ``img/<i>.png``, train800 and val200 copies of their own
    (``img/train800_<i>.png``, ``img/val200_<i>.png``), train800val200 those of train800 then of val200, so no
    held-out split shares an image with one trained on (:func:`harness.tasks.folder_format.check_disjoint`)."""
    folder = tmp / name
    (folder / "img").mkdir(parents=True)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)) for _ in range(3)]
    for prefix in ("", "train800_", "val200_"):
        for j, image in enumerate(images):
            image.save(folder / "img" / f"{prefix}{j}.png")
    sizes = sizes or {"train800": 20, "val200": 10, "train800val200": 30, "test": 12}
    prefix = {"train800": lambda i: "train800_", "val200": lambda i: "val200_", "test": lambda i: ""}
    prefix["train800val200"] = lambda i: "train800_" if i < sizes.get("train800", 0) else "val200_"
    n_train = sizes.get("train800", 0)
    for split, n in sizes.items():
        own = [(prefix[split](i), i - n_train if split == "train800val200" and i >= n_train else i) for i in range(n)]
        for pre, j in own:
            if not (folder / "img" / f"{pre}{j}.png").exists():
                # a file of its own: a hard link would be the same image (audit25 A25-09)
                shutil.copyfile(folder / "img" / f"{pre}{j % 3}.png", folder / "img" / f"{pre}{j}.png")
        lines = [f"img/{pre}{j}.png {j % k}" for pre, j in own]
        lines += [bad[split]] if bad and split in bad else []
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


# ------------------------------------------------------------------------------------ CLI options
@bad_input(
    "downstream",
    "--lrs abc (not numbers)",
    CLI_ERROR,
    r"--lrs 'abc': expected comma-separated numbers, "
    r"e\.g\. --lrs 0\.001,0\.01",
)
def lrs_not_numbers(tmp):
    downstream("--tasks", "demo_digit", "--lrs", "abc")


@bad_input(
    "downstream",
    "--lrs -0.01 (a negative learning rate)",
    CLI_ERROR,
    r"learning rates \(--lrs, lrs\) must be "
    "a non-empty list of positive numbers",
)
def lrs_negative(tmp):
    downstream("--tasks", "demo_digit", "--lrs", "-0.01")


@bad_input("downstream", "--lrs 0.01,nan", CLI_ERROR, "must be a non-empty list of positive numbers")
def lrs_nan(tmp):
    downstream("--tasks", "demo_digit", "--lrs", "0.01,nan")


@bad_input(
    "downstream",
    "--steps 1.5 (not whole)",
    CLI_ERROR,
    r"--steps '1\.5': expected comma-separated whole "
    "numbers, e.g. --steps 500,2500",
)
def steps_fraction(tmp):
    downstream("--tasks", "demo_digit", "--steps", "1.5")


@bad_input("downstream", "--steps 0", CLI_ERROR, r"steps \(--steps, steps\) must be whole numbers >= 1")
def steps_zero(tmp):
    downstream("--tasks", "demo_digit", "--steps", "0")


@bad_input(
    "downstream",
    "--resolution 32 (one number)",
    CLI_ERROR,
    r"--resolution '32': expected 2 comma-separated "
    "whole numbers, e.g. --resolution 160,128",
)
def resolution_one_number(tmp):
    downstream("--tasks", "demo_digit", "--resolution", "32")


@bad_input(
    "downstream",
    "--resolution 32,64 (crop larger than the resized image)",
    CLI_ERROR,
    "RESIZE,CROP: two whole numbers with 1 <= CROP <= RESIZE",
)
def resolution_crop_too_large(tmp):
    downstream("--tasks", "demo_digit", "--resolution", "32,64")


@bad_input(
    "downstream",
    "--gpus first (not GPU ids)",
    CLI_ERROR,
    r"--gpus 'first': expected comma-separated whole "
    "numbers, e.g. --gpus 0,1,2,3",
)
def gpus_not_ids(tmp):
    downstream("--tasks", "demo_digit", "--executor", "submitit-local", "--gpus", "first")


@bad_input("downstream", "--slurm gpu (no key=value)", CLI_ERROR, "--slurm 'gpu': expected key=value")
def slurm_not_key_value(tmp):
    downstream("--tasks", "demo_digit", "--executor", "slurm", "--slurm", "gpu")


@bad_input(
    "downstream",
    "--preset bit (the old name of the VTAB sweep)",
    CLI_ERROR,
    "preset 'bit' was renamed.*--preset vtab_sweep.*--preset bit_hyperrule",
)
def preset_bit(tmp):
    downstream("--tasks", "demo_digit", "--preset", "bit")


@bad_input(
    "downstream",
    "--preset bit_hyperrule --steps 500",
    CLI_ERROR,
    r"the BiT-HyperRule sets the steps from the training-set size .* use --schedule staircase",
)
def bit_hyperrule_with_steps(tmp):
    downstream("--tasks", "demo_digit", "--preset", "bit_hyperrule", "--steps", "500")


@bad_input(
    "downstream",
    "--device cuda:99 (no GPU on this machine, or no such GPU)",
    CLI_ERROR,
    r"--device cuda:99: (no CUDA GPU is usable on this machine .*use --device cpu|only \d+ GPU)",
)
def device_without_gpu(tmp):
    downstream("--tasks", "demo_digit", "--device", "cuda:99")


@bad_input(
    "downstream", "--device gpu (not a torch device)", CLI_ERROR, "unknown device 'gpu'.*use cpu, cuda or cuda:N"
)
def device_unknown(tmp):
    downstream("--tasks", "demo_digit", "--device", "gpu")


# ------------------------------------------------------------------------------------ task lines
@bad_input(
    "downstream",
    "two custom tasks with one name",
    CLI_ERROR,
    "two custom tasks are named 'birds'.*give each its own name",
)
def custom_same_name(tmp):
    a, b = task_folder(tmp / "a"), task_folder(tmp / "b")
    downstream("--tasks", f"birds={a}:5", "--tasks", f"birds={b}:5")


@bad_input(
    "downstream",
    "a custom task named like a VTAB-1k task (pets=FOLDER:K)",
    CLI_ERROR,
    "custom task name 'pets' is already the VTAB-1k task oxford_iiit_pet: give the custom task another name",
)
def custom_named_like_vtab(tmp):
    downstream("--tasks", f"pets={task_folder(tmp)}:5")


@bad_input(
    "downstream",
    "a custom task name with a path in it (../x=FOLDER:K)",
    CLI_ERROR,
    "custom task name '../x' must be a plain name",
)
def custom_name_path(tmp):
    downstream("--tasks", f"../x={task_folder(tmp)}:5")


@bad_input(
    "downstream",
    "a custom task with an unknown option (NAME=FOLDER:K:noflip)",
    CLI_ERROR,
    r"must look like NAME=FOLDER:NUM_CLASSES\[:no-flip\]\[:no-crop\]",
)
def custom_unknown_flag(tmp):
    downstream("--tasks", f"birds={task_folder(tmp)}:5:noflip")


@bad_input(
    "downstream",
    "a custom task label >= K (K too small in NAME=FOLDER:K)",
    CLI_ERROR,
    r"label 5; labels must lie in \[0, 5\) for task birds .* say so in its task line: birds=.*birds:6",
)
def custom_label_out_of_range(tmp):
    downstream("--tasks", f"birds={task_folder(tmp, bad={'test': 'img/extra.png 5'})}:5")


# ------------------------------------------------------------------------------------ split lists
@bad_input(
    "downstream",
    "a split list path with ../ (outside the task folder)",
    CLI_ERROR,
    r"path '\.\./secret\.png' leaves the task folder .* --allow-outside-paths",
)
def list_path_parent(tmp):
    Image.new("RGB", (8, 8)).save(tmp / "secret.png")
    downstream("--tasks", f"birds={task_folder(tmp, bad={'val200': '../secret.png 1'})}:5")


@bad_input(
    "downstream",
    "a split list path /etc/passwd (absolute)",
    CLI_ERROR,
    "path '/etc/passwd' leaves the task folder .* --allow-outside-paths",
)
def list_path_absolute(tmp):
    downstream("--tasks", f"birds={task_folder(tmp, bad={'test': '/etc/passwd 1'})}:5")


@bad_input(
    "downstream",
    "a split list line with 3 columns (a path with a space)",
    CLI_ERROR,
    r"test\.txt line 13: expected 'relative/path label' \(2 columns\), got 3.*rename the file",
)
def list_extra_column(tmp):
    downstream("--tasks", f"birds={task_folder(tmp, bad={'test': 'img/my photo.png 1'})}:5")


@bad_input(
    "downstream",
    "a split list label that is not an integer",
    CLI_ERROR,
    "train800.txt line 21: label 'cat' is not an integer class index",
)
def list_label_not_int(tmp):
    downstream("--tasks", f"birds={task_folder(tmp, bad={'train800': 'img/0.png cat'})}:5")


@bad_input(
    "downstream",
    "a listed image that does not exist",
    CLI_ERROR,
    r"1 of 13 images listed in .*test\.txt do not exist: .*img/gone\.png \(listed in .*test\.txt line 13\)",
)
def list_missing_image(tmp):
    downstream("--tasks", f"birds={task_folder(tmp, bad={'test': 'img/gone.png 1'})}:5")


@bad_input(
    "downstream",
    "a corrupt image in a task's split",
    CLI_ERROR,
    r"cannot read image '.*img/broken\.png \(listed in .*test\.txt line 13\)'.*replace or remove that file",
)
def list_corrupt_image(tmp):
    folder = task_folder(tmp, bad={"test": "img/broken.png 1"})
    (folder / "img" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    downstream("--tasks", f"birds={folder}:5")


def _vtab_root(tmp: Path, test_size: int, last: str = "") -> Path:
    sizes = {"train800": 800, "val200": 200, "train800val200": 1000, "test": test_size}
    task_folder(tmp / "vtab-1k", "dtd", k=47, sizes=sizes, bad={"test": last} if last else None)
    return tmp / "vtab-1k"


@bad_input(
    "downstream",
    "a VTAB-1k folder task whose test list has the wrong size",
    CLI_ERROR,
    "dtd test has 1879 examples in .*test.txt, VTAB-1k expects 1880",
)
def vtab_test_size(tmp):
    downstream("--tasks", "dtd", "--data-format", "folder", "--data-dir", str(_vtab_root(tmp, 1879)))


@bad_input(
    "downstream",
    "a VTAB-1k folder task label >= its K",
    CLI_ERROR,
    r"label 47; labels must lie in \[0, 47\) for task dtd.*not a dtd split: regenerate it",
)
def vtab_label_out_of_range(tmp):
    downstream(
        "--tasks", "dtd", "--data-format", "folder", "--data-dir", str(_vtab_root(tmp, 1879, "img/extra.png 47"))
    )


@bad_input(
    "downstream",
    "a VTAB-1k task whose TFDS data is not prepared",
    CLI_ERROR,
    r"TFDS dtd:3\.\*\.\* for task dtd is not prepared under data_dir .*download_and_prepare",
)
def tfds_not_prepared(tmp):
    (tmp / "tfds").mkdir()
    downstream("--tasks", "dtd", "--data-dir", str(tmp / "tfds"))
