"""Bad inputs found by the twenty-sixth reliability audit that the lead took (``audit26 <case id>``): an image folder
whose evaluation split holds copies of its training images."""

from __future__ import annotations

import os
import shutil
import warnings

from bad_inputs import handled


# ------------------------------------------------------------------------------ A26-14: a copied split
@handled(
    "upstream",
    "an image folder whose test split is a plain copy (cp -r) of its training split, and one whose val split holds "
    "one copied training image (audit26 A26-14: rc 0 without a word, training accuracy reported as test accuracy; a "
    "link of it was refused)",
    r"^named in a warning with their count and share \(12 of 12, 100%; 1 of 13, 8%\), the run trained$",
)
def _copied_test_split(tmp):
    from bad_inputs_audit23_runs import _IMF, _image_folder, _train

    _image_folder(tmp, 0)
    shutil.rmtree(tmp / "imf" / "test")
    shutil.copytree(tmp / "imf" / "train", tmp / "imf" / "test")
    shutil.copyfile(tmp / "imf" / "train" / "b" / "3.png", tmp / "imf" / "val" / "a" / "copy.png")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _train(tmp / "runs" / "t", _IMF)
    said = [str(w.message) for w in caught if "byte-for-byte copies" in str(w.message)]
    assert len(said) == 2, said
    assert said[0].startswith("data.eval_split=test: 12 of its 12 images (100%) are byte-for-byte copies of images of "
                              "data.train_split=train (first: "), said[0]  # fmt: skip
    assert said[1].startswith("data.heldout_split=val: 1 of its 13 images (8%)"), said[1]
    assert f"{os.sep}val{os.sep}a{os.sep}copy.png = " in said[1] and "Give data.heldout_split a split" in said[1]
    assert (tmp / "runs" / "t" / "metrics.json").is_file()
    return "named in a warning with their count and share (12 of 12, 100%; 1 of 13, 8%), the run trained"
