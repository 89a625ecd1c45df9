"""Bad inputs found by the twenty-fourth reliability audit (``audit24 <case id>``) on the lead's surfaces."""

from __future__ import annotations

import json

import click

from bad_inputs import bad_input, handled


# ------------------------------------------------------------------------------ A24-06: other tasks into fewshot's --out
@bad_input(
    "downstream",
    "harness fewshot --out fsX again with other --tasks, or another --resolution (audit24 A24-06: rc 0, the earlier "
    "tasks' results replaced without --overwrite, while another model, seed or shots was refused as another study)",
    click.ClickException,
    r"^.*fsX holds the few-shot results of another study \(resolution: None there, 16 now\): they would be replaced; "
    r"give another --out, or --overwrite to replace them",
)
def _fewshot_other_tasks(tmp):
    from bad_inputs_uncertainty import _cli

    def fewshot(*more):
        args = ("--model", "timm:resnet10t", "--random-init", "--shots", "1", "--log-with", "none", "--out")
        _cli("fewshot", *args, str(tmp / "fsX"), *more)

    fewshot("--tasks", "demo_digit")
    fewshot("--tasks", "demo_digit")  # the same study again: replaced, as a rerun
    try:
        fewshot("--tasks", "demo_count")
    except click.ClickException as e:
        assert "task_list: ['demo_digit'] there, ['demo_count'] now" in str(e), str(e)
    else:
        raise AssertionError("other tasks replaced the results without --overwrite")
    assert json.loads((tmp / "fsX" / "fewshot.json").read_text())["task_list"] == ["demo_digit"]
    fewshot("--tasks", "demo_digit", "--resolution", "16")


# ------------------------------------------------------------------------------ A24-04: an export's preprocessing edited
@handled(
    "exports",
    "Classifier.from_pretrained of an export whose config.json harness.model.preprocessing (mean/std) was edited, then "
    "save_pretrained (audit24 A24-04: the card's metrics, measured with the harness's normalisation, were kept)",
    r"^metrics left out with a warning naming preprocessing\.mean / \.std; kept for the unchanged export$",
)
def _edited_preprocessing(tmp):
    import shutil
    import warnings

    from bad_inputs_audit21_cards import _het_run

    from harness.models import Classifier
    from harness.runs import export_run

    export = export_run(_het_run(tmp), tmp / "export")
    edited = tmp / "edited"
    shutil.copytree(export, edited)
    config = json.loads((edited / "config.json").read_text())
    config["harness"]["model"]["preprocessing"] = {"mean": [0.0, 0.0, 0.0], "std": [0.05, 0.05, 0.05]}
    (edited / "config.json").write_text(json.dumps(config))
    for folder, stale in ((export, False), (edited, True)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = Classifier.from_pretrained(folder)
        said = " ".join(str(w.message) for w in caught)
        assert ("metrics" in model.card_info) is not stale, (folder, model.card_info)
        assert ("preprocessing.mean" in said and "preprocessing.std" in said) is stale, said
    model.save_pretrained(tmp / "again")
    assert json.loads((tmp / "again" / "config.json").read_text())["harness"]["metrics"] is None
    return "metrics left out with a warning naming preprocessing.mean / .std; kept for the unchanged export"


# ------------------------------------------------------------------------------ A24-11: a digits model out of its run
@bad_input(
    "downstream",
    "harness downstream --upstream of a copy of a digits run's model.pt (and of its export) trained on "
    "data.train_split=val, on demo_digit (audit24 A24-11: the DEMO tasks' rule read only the run folder's data, so a "
    "copied model.pt or an export, which record their training split, passed it)",
    click.ClickException,
    r"^task demo_digit: data\.train_split=val of digits is the digits val split its val200 split draws on: the images "
    r"the model --upstream .*exp was trained on \(data\.train_split=val of digits, as it records\)",
)
def _demo_of_copied_digits_model(tmp):
    import shutil

    from bad_inputs_audit19_data import _tiny_run

    from harness.runs import export_run

    from bad_inputs_uncertainty import _cli

    _tiny_run(tmp, ["data.train_split=val", "data.eval_split=test", "data.heldout_split=null"])
    shutil.copy(tmp / "r" / "model.pt", tmp / "copy.pt")
    export_run(tmp / "r", tmp / "exp")
    sweep = ("--tasks", "demo_digit", "--preset", "demo", "--lrs", "0.01", "--steps", "5", "--seeds", "1")
    try:
        _cli("downstream", "--upstream", str(tmp / "copy.pt"), *sweep, "--log-with", "none", "--out", str(tmp / "s1"))
    except click.ClickException as e:
        assert "task demo_digit: data.train_split=val of digits" in str(e) and "as it records" in str(e), str(e)
    else:
        raise AssertionError("a copied model.pt of a digits val run was transferred to demo_digit")
    _cli("downstream", "--upstream", str(tmp / "exp"), *sweep, "--log-with", "none", "--out", str(tmp / "s2"))


# ------------------------------------------------------------------------------ A24-12: held-out labels changed since
@bad_input(
    "report",
    "harness report of an image-folder run trained with no label noise, after images of its held-out folder were "
    "moved to another class folder (audit24 A24-12: the report called the changed labels the run's label noise, "
    "'noisy labels (25.0% differ from clean)' in the audit)",
    click.ClickException,
    r"2 of 6 held-out labels of runs/imf \(its heldout_predictions\.npz, as the run stored them\) differ from those "
    r"its held-out split \(val of image_folder at .*imf\) holds now, and the run's data has no label noise: the data "
    r"changed since the run was evaluated",
)
def _heldout_labels_changed(tmp):
    from bad_inputs_audit21_data import _IMF, _image_folder, _train

    from bad_inputs_uncertainty import _cli

    _image_folder(tmp / "imf")
    _train("runs/imf", *_IMF)
    _cli("report", "runs/imf", "--no-shift", "--name", "r1")  # the data as the run read it: reported
    assert "clean labels" in (tmp / "results" / "r1" / "report.md").read_text()
    for i in range(2):
        (tmp / "imf" / "val" / "a" / f"{i}.png").rename(tmp / "imf" / "val" / "b" / f"1{i}.png")
    _cli("report", "runs/imf", "--no-shift", "--name", "r2")


# ------------------------------------------------------------------------------ A24-10: an import without predictions
@bad_input(
    "report",
    "harness report of an imported run folder whose predictions.npz is missing (audit24 A24-10: 'neither a finished "
    "run folder ... run harness upstream / harness ensemble first', naming neither the missing file nor a fix that "
    "applies to an import)",
    click.ClickException,
    r"'imp' is a run folder without its predictions\.npz: import its model again into a new folder \(an imported "
    r"run, made by harness import: harness import --model .*model\.pt --data imp/config\.yaml --out NEW_FOLDER\)",
)
def _import_without_predictions(tmp):
    from bad_inputs_audit21_data import _train

    from bad_inputs_uncertainty import _cli

    _train("runs/base", "data.limit_train=64", "data.limit_eval=32")
    (tmp / "e.yaml").write_text(
        "data:\n  source: digits\n  eval_split: test\n  heldout_split: null\n  limit_eval: 20\n"
    )
    _cli("import", "--model", "runs/base/model.pt", "--data", "e.yaml", "--out", "imp")
    (tmp / "imp" / "predictions.npz").unlink()
    _cli("report", "imp", "--no-shift", "--name", "ri")


# ------------------------------------------------------------------------------ A24-13: a report of a retrained run
@bad_input(
    "report",
    "harness report runs/bx --name rbx again after runs/bx was trained again (another seed) in the same folder "
    "(audit24 A24-13: rc 0, the earlier model's report replaced without --overwrite, while another path was refused)",
    click.ClickException,
    r"results/rbx holds the report of the same folders' earlier weights \(digests .*runs/bx: \w{12}\.\.\. there, "
    r"\w{12}\.\.\. now\), not of .*runs/bx: writing this report there would replace it; .*or give --overwrite",
)
def _report_of_retrained_run(tmp):
    import shutil

    from bad_inputs_audit21_data import _train

    from bad_inputs_uncertainty import _cli

    _train("runs/bx", "data.limit_train=64", "data.limit_eval=32", "seed=7")
    _cli("report", "runs/bx", "--no-shift", "--name", "rbx")
    _cli("report", "runs/bx", "--no-shift", "--name", "rbx")  # the same run again: a rerun, replaced
    shutil.rmtree(tmp / "runs" / "bx")
    _train("runs/bx", "data.limit_train=64", "data.limit_eval=32", "seed=8")
    _cli("report", "runs/bx", "--no-shift", "--name", "rbx")
