"""Bad inputs found by the thirteenth reliability audit that the lead fixed (``audit13 <case id>``): trackers whose
store was known to be unusable before any work (an sqlite: file that is no database, a WANDB_DIR that is a file or
another run's folder)."""

from __future__ import annotations

import click
from bad_inputs_audit9_config import CLI_ERROR, CONFIGS
from bad_inputs_audit11_trackers import _upstream_tracked

from bad_inputs import bad_input, handled


# ------------------------------------------------------------------------------ A13-03: an sqlite: file, not a database
@bad_input(
    "trackers",
    "MLFLOW_TRACKING_URI=sqlite:///bad.db where bad.db is a text file (audit13 A13-03: 'mlflow failed in start "
    "(DatabaseError: file is not a database)', the run went on untracked, exit status 0)",
    ValueError,
    r"MLFLOW_TRACKING_URI 'sqlite:///[^']*' names .*bad\.db, which is a file that is not an SQLite database: "
    r"MLflow would fail as the run starts .*give a new file name .*or leave mlflow out of train\.log_with",
)
def _mlflow_sqlite_not_a_database(tmp):
    (tmp / "bad.db").write_text("hello not a db\n")
    _upstream_tracked(tmp, "mlflow", MLFLOW_TRACKING_URI=f"sqlite:///{tmp / 'bad.db'}")


# ------------------------------------------------------------------------------ A13-04: WANDB_DIR
@bad_input(
    "trackers",
    "WANDB_MODE=offline WANDB_DIR=<a file> (audit13 A13-04: W&B logged to /tmp/wandb/offline-run-* without a word, "
    "not where WANDB_DIR says)",
    ValueError,
    r"WANDB_DIR='.*wfile' is not a folder: make the folder .*or leave wandb out of train\.log_with",
)
def _wandb_dir_a_file(tmp):
    (tmp / "wfile").write_text("x\n")
    _upstream_tracked(tmp, "wandb", WANDB_MODE="offline", WANDB_DIR=str(tmp / "wfile"))


@bad_input(
    "trackers",
    "WANDB_MODE=offline WANDB_DIR=<a finished harness run> (audit13 A13-04: W&B's wandb/offline-run-* written into "
    "the other run's folder, rc 0)",
    ValueError,
    r"WANDB_DIR='.*base' is inside the harness run folder .*base \(it holds run\.json\), which W&B would fill with its own files",
)
def _wandb_dir_in_a_run(tmp):
    (tmp / "base").mkdir()
    (tmp / "base" / "run.json").write_text("{}\n")  # what marks a harness run folder
    _upstream_tracked(tmp, "wandb", WANDB_MODE="offline", WANDB_DIR=str(tmp / "base"))
    assert not (tmp / "base" / "wandb").exists()


# ------------------------------------------------------------------------------ A13-07: an empty class folder
@bad_input(
    "upstream",
    "image_folder whose train split holds an empty class folder c (audit13 A13-07: torchvision's 'Found no valid file "
    "for the classes c. Supported extensions are ...', naming neither the folder, the split nor the fix)",
    CLI_ERROR,
    r"1 class folder\(s\) of split 'train' \(data\.path '.*imf'\) hold no image \(\.jpg, .*\): '.*imf/train/c'; add "
    r"images, or remove the folder",
)
def _image_folder_empty_class(tmp):
    from bad_inputs_audit11_lead import image_folder_upstream

    image_folder_upstream(tmp, {"train": "ab", "test": "ab"}, empty=("train/c",))


# ------------------------------------------------------------------------------ A13-09: a report over other labels
@bad_input(
    "uncertainty",
    "harness report over two runs of the same examples whose targets differ (audit13 A13-09: rc 0, the second scored "
    "against its own labels in the same tables and paired comparisons; harness ensemble refused the pair)",
    click.ClickException,
    r"hom seed 1 \(.*b\) was evaluated on other data, classes or labels than hom seed 0: example index \d+ has target \d+ vs \d+ "
    r"\(different evaluation data or labels\); report runs of one experiment together",
)
def _report_other_targets(tmp):
    from bad_inputs_uncertainty import _cli, make_run

    make_run(tmp / "a", 0)
    make_run(tmp / "b", 1, labels_seed=1)  # the same 40 examples, other labels
    try:
        _cli("report", str(tmp / "a"), str(tmp / "b"), "--name", "r", "--out-root", str(tmp / "rep"))
    finally:
        assert not (tmp / "rep").exists(), "the report was written"


# ------------------------------------------------------------------------------ A13-11: an op after the layer
@bad_input(
    "heads",
    "hetify(model, layer='fc', example_input=...) where forward() returns torch.sigmoid(self.fc(...)) (audit13 A13-11: "
    "accepted; the model returned sigmoid of log-probabilities, a module after the layer was refused)",
    ValueError,
    r"layer='fc' is not the model's output: in a forward of an input of shape \(1, 4\), forward\(\) of M computes its "
    r"output from the output of 'fc' .*move that computation out of forward\(\), or pass check_output=False",
)
def _hetify_sigmoid_after_layer(tmp):
    import torch
    from torch import nn

    from harness.heads import hetify

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.fc = nn.Linear(4, 8), nn.Linear(8, 5)

        def forward(self, x):
            return torch.sigmoid(self.fc(torch.relu(self.a(x))))

    model = M()
    try:
        hetify(model, covariance="diagonal", layer="fc", example_input=torch.randn(1, 4))
    finally:
        assert isinstance(model.fc, nn.Linear), "the layer was replaced before the refusal"


# ------------------------------------------------------------------------------ A13-05: probabilities for log_probs
@bad_input(
    "uncertainty",
    "classification_metrics(probabilities, labels): rows in [0, 1] summing to 1 given as log_probs (audit13 A13-05: "
    "'these look like raw logits: pass log_softmax(logits)', whose result scores a flattened, wrong distribution)",
    ValueError,
    r"log_probs must be normalised log-probabilities .*these look like probabilities \(each row in \[0, 1\], summing "
    r"to 1\): pass np\.log\(probs\)",
)
def _metrics_given_probabilities(tmp):
    import numpy as np

    from harness.uncertainty import metrics as M

    rng = np.random.default_rng(0)
    M.classification_metrics(np.exp(M.log_softmax(rng.normal(size=(200, 10)))), rng.integers(0, 10, 200))


# ------------------------------------------------------------------------------ A13-08: a noisy head in the timm layout
@bad_input(
    "exports",
    "Classifier.from_pretrained of a timm-layout export whose config.json says head.covariance 'diagonal' (audit13 "
    "A13-08: loaded without a word, the noise layers freshly initialised under the trained mean layer)",
    ValueError,
    r"config\.json: harness\.model\.head\.covariance = 'diagonal' with harness\.layout = 'timm': the timm layout holds "
    r"a homoscedastic head's classifier alone .*give the folder save_pretrained wrote, unchanged",
)
def _timm_layout_noisy_head(tmp):
    import json

    from harness.models import Classifier, ModelConfig, build_model

    build_model(ModelConfig("test_resnet", 10, {"covariance": "none"})).save_pretrained(tmp / "exp")
    path = tmp / "exp" / "config.json"
    config = json.loads(path.read_text())
    assert config["harness"]["layout"] == "timm", config["harness"]["layout"]
    config["harness"]["model"]["head"]["covariance"] = "diagonal"
    path.write_text(json.dumps(config))
    Classifier.from_pretrained(tmp / "exp")


# ------------------------------------------------------------------------------ A13-15: import, held-out = evaluation
@bad_input(
    "import",
    "harness import ... heldout_split=test (audit13 A13-15: rc 0, the held-out predictions the same test images; "
    "the report fitted T on the images it then scored; harness upstream refuses the same since A12-01)",
    click.ClickException,
    r"data\.heldout_split=test is also data\.eval_split: the held-out predictions .*would be the evaluation images, "
    r"not held out: .*or data\.heldout_split=null for none",
)
def _import_heldout_is_eval(tmp):
    from bad_inputs_safety import _cli, _model_pt

    model = _model_pt(tmp / "model.pt")
    try:
        _cli("import", "--model", str(model), "--data", str(CONFIGS / "digits_hom.yaml"), "--out", str(tmp / "imp"),
             "heldout_split=test", "limit_eval=20")  # fmt: skip
    finally:
        assert not (tmp / "imp").exists(), "the import was written"


# ------------------------------------------------------------------------------ A13-17: two lists for one split
@bad_input(
    "data",
    "a manifest folder holding both train.jsonl and train.csv, with other labels (audit13 A13-17: rc 0, the JSONL's "
    "labels packed, the CSV ignored without a word)",
    click.ClickException,
    r"split 'train' of the manifest folder '.*m' has two lists, train\.jsonl and train\.csv: which one holds the "
    r"labels meant is not known; remove \(or rename\) the one that is not",
)
def _manifest_jsonl_and_csv(tmp):
    from bad_inputs_audit8_packs import _manifest, _pack_manifest

    m = _manifest(tmp, *({"path": f"img/{i}.png", "labels": [i % 3]} for i in range(4)))
    (m / "train.csv").write_text("".join(f"img/{i}.png,{(i + 1) % 3}\n" for i in range(4)))
    _pack_manifest(tmp, m)


# ------------------------------------------------------------------------------ A13-18: names from report.json
@handled(
    "report",
    "harness report --overwrite after notes.txt (the user's) was added to the old report.json's figures.reliability "
    "(audit13 A13-18: notes.txt deleted as a stale figure, on the word of the edited report.json)",
    r"notes\.txt kept; the stale figure reliability_1\.png removed",
)
def _report_overwrite_listed_notes(tmp):
    import json

    from bad_inputs_audit9_writes import _report, _three_runs

    _three_runs(tmp)
    _report(tmp, "a", "b")
    out = tmp / "res" / "R"
    (out / "notes.txt").write_text("my notes")
    old = json.loads((out / "report.json").read_text())
    old["figures"]["reliability"].append("notes.txt")
    (out / "report.json").write_text(json.dumps(old))
    _report(tmp, "c", extra=("--overwrite",))
    assert (out / "notes.txt").read_text() == "my notes", "a file the report did not write was deleted"
    assert not (out / "reliability_1.png").exists(), "the stale figure was kept"
    return "notes.txt kept; the stale figure reliability_1.png removed"


# ------------------------------------------------------------------------------ A13-10: an evaluation shard cut short
@bad_input(
    "packs",
    "harness upstream on shards whose test shard was cut to 5000 bytes (audit13 A13-10: refused only after the "
    "training epoch, when the evaluation split was first read)",
    CLI_ERROR,
    r"shard .*test-000003\.tar is 5000 bytes, and .*index\.json records \d+: it is damaged \(cut short, or "
    r"replaced\); run the same harness data pack command again",
)
def _eval_shard_cut_short(tmp):
    from harness.cli import main

    for split in ("train", "test"):
        limit = ["limit_train=100"] if split == "train" else []  # the whole test split: 8 shards
        args = ["data", "pack", "digits", str(tmp / "pk"), "--shard-size", "50", "--split", split, *limit]
        main(args, standalone_mode=False)
    shard = tmp / "pk" / "test" / "test-000003.tar"
    shard.write_bytes(shard.read_bytes()[:5000])
    settings = ["data.source=shards", f"data.path={tmp / 'pk'}", "data.label_noise=null", "data.heldout_split=null"]
    try:
        main(
            ["upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), "train.epochs=1", *settings]
            + ["data.batch_size=32", "train.log_with=[]", f"output_dir={tmp / 'r'}"],
            standalone_mode=False,
        )
    finally:
        assert not (tmp / "r" / "checkpoints").exists(), "training started before the error"


# ------------------------------------------------------------------------------ A13-20: an unknown name, no weights
@bad_input(
    "import",
    "harness import --model timm:not_a_model without --weights (audit13 A13-20: 'needs --weights FILE', sending the "
    "user to find weights of a model that does not exist; the unknown name came only once weights were given)",
    click.ClickException,
    r"unknown backbone 'not_a_model': not a timm model \(see timm\.list_models\(\)\)",
)
def _import_unknown_timm_name(tmp):
    from bad_inputs_safety import _cli

    _cli("import", "--model", "timm:not_a_model", "--data", str(CONFIGS / "digits_hom.yaml"), "--out", str(tmp / "i"))


# ------------------------------------------------------------------------------ A13-24: two noise models stacked
@bad_input(
    "data",
    "data.source=cifar10n data.label_set=worse under digits_hom.yaml, whose base sets 30% pair-flip label noise "
    "(audit13 A13-24: rc 0, the human 'worse' labels flipped again by 30%, without a word)",
    ValueError,
    r"data\.label_noise\.kind=pair_flip with data\.label_set=worse: the synthetic noise would flip the CIFAR-10N human "
    r"labels \(worse\) again.*set data\.label_noise=null for the human labels alone, or data\.label_set=clean",
)
def _cifar10n_human_and_synthetic_noise(tmp):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig, validate

    settings = ["data.source=cifar10n", f"data.path={tmp / 'c10n'}", "data.label_set=worse", f"output_dir={tmp / 'r'}"]
    validate(load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml", settings))


# ------------------------------------------------------------------------------ A13-25: two label spaces, one metric
@bad_input(
    "uncertainty",
    "a streaming Brier fed a batch of 4 classes, then one of 3 (audit13 A13-25: Brier 0.8235 printed, two label "
    "spaces averaged as one evaluation)",
    ValueError,
    r"Brier has seen batches of 4 classes; got preds of shape \(5, 3\): one evaluation scores one label space; call "
    r"reset\(\) between evaluations",
)
def _streaming_two_label_spaces(tmp):
    import torch

    from harness.uncertainty import streaming as S

    metric = S.Brier()
    metric.update(torch.log_softmax(torch.randn(50, 4), -1), torch.randint(0, 4, (50,)))
    metric.update(torch.log_softmax(torch.randn(5, 3), -1), torch.randint(0, 3, (5,)))


# ------------------------------------------------------------------------------ A13-22: downstream keys, stage off
@bad_input(
    "experiment",
    "an experiment with downstream: {tasks: []} and downstream.preset=vtab_sweep (audit13 A13-22: accepted; no "
    "transfer runs, the preset never read)",
    ValueError,
    r"downstream\.preset=vtab_sweep is read only with downstream\.tasks, and this experiment has none, so it would be "
    r"ignored: remove downstream\.preset, or give downstream\.tasks \(an override downstream\.tasks=\[\] switches it "
    r"off whole\)",
)
def _downstream_keys_stage_off(tmp):
    from harness.experiment import load_experiment, validate_experiment

    (tmp / "e.yaml").write_text(
        f"name: tiny\nupstream_config: {CONFIGS / 'digits_base.yaml'}\nmethods: {{hom: {{covariance: none}}}}\n"
        f"seeds: [0]\nruns_root: {tmp / 'xruns'}\nresults_root: {tmp / 'xres'}\ndownstream: {{tasks: []}}\n"
    )
    validate_experiment(load_experiment(str(tmp / "e.yaml"), ("downstream.preset=vtab_sweep",)))


# ------------------------------------------------------------------------------ A13-21: one folder, another spelling
@handled(
    "upstream",
    "a finished run rerun as output_dir=./runs/base from its parent folder, trained as <abs>/runs/base (audit13 "
    "A13-21: 'holds a run with a different config ... -output_dir: runs/k +output_dir: ./runs/k ... delete that folder')",
    r"the run counted as done, nothing trained again",
)
def _same_run_folder_spelled_otherwise(tmp):
    import os

    from bad_inputs_safety import _cli

    settings = ["train.epochs=1", "data.limit_train=64", "data.limit_eval=32", "train.log_with=[]"]
    _cli("upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), *settings,
         f"output_dir={tmp / 'runs' / 'base'}")  # fmt: skip
    model = tmp / "runs" / "base" / "model.pt"
    before, cwd = model.stat().st_mtime_ns, os.getcwd()
    os.chdir(tmp)
    try:
        _cli("upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), *settings,
             "output_dir=./runs/base")  # fmt: skip
    finally:
        os.chdir(cwd)
    assert model.stat().st_mtime_ns == before, "the run was trained again"
    return "the run counted as done, nothing trained again"


# ------------------------------------------------------------------------------ A13-19: control characters in --out
@bad_input(
    "cli",
    "harness fewshot --out $'fs\\nnl' (audit13 A13-19: rc 0, a folder 'fs<newline>nl' made; config keys refused the "
    "same since A12-13)",
    click.BadParameter,
    r"--out '.*fs\\nnl' holds the control character '\\n': a path setting cannot hold one",
)
def _fewshot_out_newline(tmp):
    from bad_inputs_safety import _cli

    try:
        _cli("fewshot", "--model", str(tmp / "model.pt"), "--tasks", "demo_digit", "--log-with", "none", "--out",
             str(tmp / "fs\nnl"), "--shots", "1")  # fmt: skip
    finally:
        assert not (tmp / "fs\nnl").exists(), "the folder was made"
