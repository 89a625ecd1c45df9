"""Bad inputs found by the seventeenth reliability audit that the lead fixed (``audit17 <case id>``)."""

from __future__ import annotations

import click
from bad_inputs_audit8_experiment import TINY
from bad_inputs_audit8_experiment import _run as _tiny
from bad_inputs_audit12_plan import _run as _experiment
from bad_inputs_audit12_tasks import _refused_before_work

from bad_inputs import bad_input, handled
from bad_inputs_downstream import CLI_ERROR, task_folder
from bad_inputs_uncertainty import _cli, make_run


# ------------------------------------------------------------------------------ A17-02: runs of one method differ
@bad_input(
    "report",
    "harness report of two hom runs, seeds 0 and 1, the second trained 2 epochs, the first 1 (audit17 A17-02: rc 0, "
    "averaged as the seeds of one method, the spread of two settings read as training randomness)",
    click.ClickException,
    r"^.*a and .*b are both 'hom' runs, which the report averages as the method's seeds, but they train differently: "
    r"train\.epochs=1 in .*a, 2 in .*b \(replicates differ only in seed\); report them apart",
)
def _report_runs_trained_differently(tmp):
    a, b = make_run(tmp / "a", seed=0), make_run(tmp / "b", seed=1)
    for run, epochs in ((a, 1), (b, 2)):
        (run / "config.yaml").write_text((run / "config.yaml").read_text() + f"train:\n  epochs: {epochs}\n")
    try:
        _cli("report", str(a), str(b), "--out-root", str(tmp / "rep"), "--name", "r", "--no-covariance")
    finally:
        assert not (tmp / "rep" / "r" / "report.md").exists()


# ------------------------------------------------------------------------------ A17-03: one image twice, by a link
@bad_input(
    "downstream",
    "a custom task whose test list names img/0.png on line 1 and img2/0.png on line 2, img2 a link to img inside the "
    "task folder (audit17 A17-03: rc 0, the image scored twice; a repeat of one spelling is refused)",
    CLI_ERROR,
    r"birds/test\.txt line 2 lists .*birds/img2/0\.png, the image line 1 lists as .*birds/img/0\.png \(both are "
    r".*img/0\.png, through a link\): a split names each image once .*remove one of the lines",
)
def _image_twice_through_a_link(tmp):
    folder = task_folder(tmp)
    (folder / "img2").symlink_to(folder / "img", target_is_directory=True)
    lines = (folder / "test.txt").read_text().splitlines()
    (folder / "test.txt").write_text("\n".join([lines[0], "img2/0.png 0", *lines[2:]]) + "\n")
    _refused_before_work(tmp, "--tasks", f"birds={folder}:5")


# ------------------------------------------------------------------------------ A17-04: runs before the declaration
@bad_input(
    "experiment",
    "primary.declared a day after the main study's runs (run.json date), prospective_for [main] (audit17 A17-04: rc "
    "0, the report said 'declared ..., before the runs')",
    ValueError,
    r"^primary\.declared=2026-11-28 with primary\.prospective_for naming main, but run hom_s0 started on 2026-11-27, "
    r"before the declaration, so the report would call its runs prospective: give the day the endpoint was declared, "
    r"or take main out of primary\.prospective_for",
)
def _declared_after_the_runs(tmp):
    import json

    run = tmp / "r" / "tpa" / "upstream" / "hom_s0"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"date": "2026-11-27 10:00 UTC"}))  # the run's own record of its start
    primary = "primary: {metric: nll, split: heldout, declared: '2026-11-28', prospective_for: [main]}\n"
    from harness.experiment import load_experiment, validate_experiment

    (tmp / "tpa.yaml").write_text(TINY.replace("name: tiny", "name: tpa") + primary)
    validate_experiment(
        load_experiment(str(tmp / "tpa.yaml"), (f"runs_root={tmp / 'r'}", f"results_root={tmp / 'res'}"))
    )


# ------------------------------------------------------------------------------ A17-01: a condition's other splits
@bad_input(
    "experiment",
    "a condition with [data.train_split=nope] (audit17 A17-01: accepted; the main study trained, then the condition's "
    "run failed 'unknown digits split nope'; its evaluation split alone was read before work)",
    ValueError,
    r"^conditions\.c1, method hom, seed 0: unknown digits split 'nope': use one of",
)
def _condition_training_split(tmp):
    _experiment(
        tmp,
        "tts",
        "conditions: {c1: {description: x, upstream_overrides: [data.train_split=nope], methods: [hom], seeds: [0]}}\n",
    )


@bad_input(
    "experiment",
    "a condition with [data.heldout_split=nope] (audit17 A17-01: accepted; refused only when the condition's run came)",
    ValueError,
    r"^conditions\.c1, method hom, seed 0: .*unknown digits split 'nope'",
)
def _condition_heldout_split(tmp):
    _experiment(
        tmp,
        "ths",
        "conditions: {c1: {description: x, upstream_overrides: [data.heldout_split=nope], methods: [hom], seeds: [0]}}\n",
    )


# ------------------------------------------------------------------------------ A17-05..07: experiment settings
@bad_input(
    "experiment",
    "evaluate_methods=[] (audit17 A17-05: read as every method, so every run got its shift predictions and transfers)",
    ValueError,
    r"^evaluate_methods=\[\] names no method: for no shift predictions and transfers, leave out the shift section and "
    r"give downstream\.tasks=\[\]; for every method, leave evaluate_methods unset",
)
def _evaluate_no_method(tmp):
    _tiny(tmp, "evaluate_methods=[]")


@bad_input(
    "experiment",
    "methods.hom.tune of data.limit_eval [20, 30] (audit17 A17-06: one model trained twice, the evaluation subset on "
    "which it looked best 'chosen', every result then on 20 test images); train.eval_every likewise",
    ValueError,
    r"^method 'hom': tune\.key data\.limit_eval is read by the evaluation, not by training: .*tune a training setting",
)
def _tune_an_evaluation_key(tmp):
    import pytest

    with pytest.raises(ValueError, match=r"tune\.key train\.eval_every sets how often a run is evaluated"):
        _tiny(tmp, "methods={hom: {covariance: none, tune: {key: train.eval_every, values: [1, 2]}}}")
    _tiny(tmp, "methods={hom: {covariance: none, tune: {key: data.limit_eval, values: [20, 30]}}}")


@bad_input(
    "experiment",
    "methods.hom.tune of data.label_noise.rate [0.1, 0.2] (audit17 A17-07: refused as 'not a setting of the upstream "
    "config (data.label_noise has no settings inside)', which it has)",
    ValueError,
    r"^method 'hom': tune\.key data\.label_noise\.rate sets the data's label noise, not how a run trains: .*study noise "
    r"rates as conditions",
)
def _tune_the_noise(tmp):
    _tiny(tmp, "methods={hom: {covariance: none, tune: {key: data.label_noise.rate, values: [0.1, 0.2]}}}")


# ------------------------------------------------------------------------------ A17-08: the evaluation view exported
@handled(
    "exports",
    "timm.data.resolve_data_config of a harness model trained at image_size 32, eval_resize 32 (and of one at the "
    "default eval_resize): its export and the Classifier itself (audit17 A17-08: crop 0.95 and, on the Classifier, "
    "160 px stated for a model scored at 32 px, crop 1.0)",
    r"^timm's eval transform is the harness's: Resize\(32\) CenterCrop\(32\), and Resize\(37\) CenterCrop\(32\) for "
    r"the default eval_resize$",
)
def _export_states_the_evaluation_view(tmp):
    import json

    import timm

    from harness.models import Classifier, ModelConfig, build_model

    shown = []
    for resize, expected in ((32, 32), (None, 37)):  # eval_resize null: image_size / 0.875 (harness transforms)
        model = build_model(ModelConfig("test_resnet", 10, {"covariance": "none"}))
        out = tmp / f"exp{resize}"
        model.save_pretrained(out, trained_on={"image_size": 32, "eval_resize": resize})
        cfg = json.loads((out / "config.json").read_text())["pretrained_cfg"]
        for source in (cfg, Classifier.from_pretrained(out).pretrained_cfg):
            data = timm.data.resolve_data_config(pretrained_cfg=source)
            steps = timm.data.create_transform(**data).transforms
            sizes = [getattr(t, "size", None) for t in steps[:2]]
            assert tuple(data["input_size"]) == (3, 32, 32) and sizes[0] == expected and list(sizes[1]) == [32, 32], (
                sizes
            )
        shown.append(f"Resize({expected}) CenterCrop(32)")
    return f"timm's eval transform is the harness's: {shown[0]}, and {shown[1]} for the default eval_resize"


# ------------------------------------------------------------------------------ A17-09, A17-10: import, data pack
@bad_input(
    "import",
    "harness import --out imp while another harness import holds imp (audit17 A17-09: both rc 0, the first's files "
    "replaced by the second's; the folder was checked before predicting, never again under the lock)",
    click.ClickException,
    r"imp is being written by another process \(PID .*\): another harness import is writing there; wait for it, or "
    r"give --out a folder of its own",
)
def _import_twice_at_once(tmp):
    from bad_inputs_audit9_config import CONFIGS

    from harness.io import RunLock

    from bad_inputs_downstream import _upstream as _harness_model

    with RunLock(tmp / "imp", what="the other import"):  # the other harness import, still predicting
        try:
            _cli("import", "--model", _harness_model(), "--data", str(CONFIGS / "digits_hom.yaml"), "--out",
                 str(tmp / "imp"), "limit_eval=20")  # fmt: skip
        finally:
            assert not (tmp / "imp" / "run.json").exists(), "an import written into a folder another one holds"


@bad_input(
    "packs",
    "harness data pack digits pk --split train label_noise.kind=symmetric label_noise.rate=inf (also rate=abc, "
    "seed=nan) (audit17 A17-10: a 40-line traceback from the noise code after the source was read)",
    click.ClickException,
    r"^data\.label_noise\.rate must be in \[0, 1\], got inf",
)
def _pack_noise_values(tmp):
    import pytest

    for bad, message in (("label_noise.rate=abc", "could not convert string to float: 'abc'"),
                         ("label_noise.seed=nan", r"label_noise\.seed must be a whole number")):  # fmt: skip
        with pytest.raises(click.ClickException, match=message):
            _cli(
                "data",
                "pack",
                "digits",
                str(tmp / "pk"),
                "--shard-size",
                "100",
                "--split",
                "train",
                "label_noise.kind=symmetric",
                bad,
            )
    try:
        _cli("data", "pack", "digits", str(tmp / "pk"), "--shard-size", "100", "--split", "train", "label_noise.kind=symmetric",
             "label_noise.rate=inf")  # fmt: skip
    finally:
        assert not (tmp / "pk").exists(), "the pack was started before the refusal"


# ------------------------------------------------------------------------------ A17-11: shift sets not shared
@handled(
    "shift",
    "harness report of runs/a (shift sets clean, frost-1) and runs/b (clean, fog-2) (audit17 A17-11: rc 0, the "
    "section said 'no corrupted sets' of two runs that each had one, the sets it dropped unnamed)",
    r"^the section names what it leaves out: hom seed 0 \(.*a\): frost-1; hom seed 1 \(.*b\): fog-2$",
)
def _report_shift_sets_differ(tmp):
    import json

    import numpy as np

    from harness.io import atomic_write_text
    from harness.uncertainty.predictions import Predictions

    for seed, (name, corrupted) in enumerate((("a", "frost-1"), ("b", "fog-2"))):
        run = make_run(tmp / name, seed=seed)
        p, rows = Predictions.load(run), np.arange(20)
        for s in ("clean", corrupted):
            Predictions(p.logits[rows], p.targets[rows], rows, p.class_names, "softmax").save(
                run / "shift" / s / "predictions.npz"
            )
        spec = {"sets": {"clean": "x", corrupted: "y"}, "order": ["clean", corrupted], "examples": 20,
                "eval_data": "synthetic", "settings": {}, "key": {}}  # fmt: skip
        atomic_write_text(run / "shift" / "shift.json", json.dumps(spec))
    _cli("report", str(tmp / "a"), str(tmp / "b"), "--out-root", str(tmp / "rep"), "--name", "r", "--no-covariance")
    text = (tmp / "rep" / "r" / "report.md").read_text()
    said = next(line for line in text.splitlines() if "Left out, as not every entry has them" in line)
    left = said.split("includes them): ", 1)[1].rstrip(".")
    assert "frost-1" in left and "fog-2" in left, said
    return f"the section names what it leaves out: {left}"


# ------------------------------------------------------------------------------ A17-12: one folder, two task names
@bad_input(
    "downstream",
    "--tasks 't=<folder>:5,u=<folder>/:5' (one task folder under two names) (audit17 A17-12: rc 0, the task trained "
    "and scored twice, counted twice in the mean over tasks)",
    CLI_ERROR,
    r"custom tasks 't' \(t=.*birds:5\) and 'u' \(u=.*birds/?:5\) are one task folder \(.*birds\): it would be trained "
    r"and scored twice and counted twice in the mean over tasks .*give it once",
)
def _one_folder_two_names(tmp):
    folder = task_folder(tmp)
    _refused_before_work(tmp, "--tasks", f"t={folder}:5,u={folder}/:5")
