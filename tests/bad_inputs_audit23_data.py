"""Bad inputs found by the twenty-third reliability audit in the data's rules (``audit23 <case id>``): an output
folder written inside the image folder a command reads (harness data pack, harness ensemble), an ensemble's
``--eval-data`` path read against the working folder, and splits compared by the list or folder read rather than the
images it names (a manifest's copied list, class folders linked into the training split)."""

from __future__ import annotations

from bad_inputs_audit9_config import CLI_ERROR
from bad_inputs_audit21_data import _image_folder

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli


# ------------------------------------------------------------------------ A23-06: a pack inside the folder it packs
@bad_input(
    "data",
    "harness data pack image_folder imf/train/pk --split train path=imf (audit23 A23-06: rc 0, the pack became a class "
    "folder of the training split it packed, with no image, so every later run on imf was refused)",
    CLI_ERROR,
    r"OUT imf/train/pk \(its split folder imf/train/pk/train\) is inside the data's train split \(data\.path=imf\) "
    r"imf/train, which would then hold harness data pack's files .*give OUT a folder outside imf/train",
)
def _pack_inside_the_split_it_packs(tmp):
    _image_folder(tmp / "imf")
    _cli("data", "pack", "image_folder", "imf/train/pk", "--shard-size", "10", "--split", "train", "path=imf")


@bad_input(
    "data",
    "harness data pack image_folder imfp --split val path=imfp --overwrite: OUT the image folder itself (audit23 "
    "A23-06: the advised --overwrite wrote index.json and the tar shards beside the class folders of the split read)",
    CLI_ERROR,
    r"OUT imfp \(its split folder imfp/val\) is the data's val split \(data\.path=imfp\) imfp/val itself, which would "
    r"then hold harness data pack's files",
)
def _pack_over_the_split_it_packs(tmp):
    _image_folder(tmp / "imfp")
    _cli("data", "pack", "image_folder", "imfp", "--shard-size", "10", "--split", "val", "path=imfp", "--overwrite")
