"""Bad inputs found by the eleventh reliability audit in the upstream config (``audit11 <case id>``): data keys the
chosen source, loader or augmentation does not read, train and optim keys no part of the run reads, and YAML's reading
of ``no`` as a switch. Every refusal comes before any work."""

from __future__ import annotations

from bad_inputs_audit8_experiment import _run
from bad_inputs_audit9_config import CLI_ERROR, CONFIGS, _upstream

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli, make_run


# ------------------------------------------------------------------------------ A11-01: keys of another source
@bad_input(
    "upstream",
    "data.multilabel=true with data.source=digits (audit11 A11-01: config.yaml said multilabel, the run trained "
    "single-label)",
    CLI_ERROR,
    r"data\.multilabel=true is read only by data\.source=cifar10n or manifest or shards, and this run's source is digits: remove "
    r"data\.multilabel",
)
def _multilabel_on_digits(tmp):
    _upstream(tmp, "data.multilabel=true")


@bad_input(
    "upstream",
    "data.name=foo, data.image_key=img with data.source=digits (audit11 A11-01: TFDS keys saved, never read)",
    CLI_ERROR,
    r"data\.name=foo is read only by data\.source=tfds, and this run's source is digits: remove data\.name, or use "
    r"data\.source=tfds",
)
def _tfds_keys_on_digits(tmp):
    _upstream(tmp, "data.name=foo", "data.image_key=img")


@bad_input(
    "upstream",
    "data.path=/tmp with data.source=digits (audit11 A11-01: digits are scikit-learn's, the path was ignored)",
    CLI_ERROR,
    r"data\.path=/tmp is read only by data\.source=cifar10n or image_folder or tfds or manifest or shards, and this "
    r"run's source is digits",
)
def _path_on_digits(tmp):
    _upstream(tmp, "data.path=/tmp")


@bad_input(
    "upstream",
    "data.shuffle_buffer=5 and data.allow_outside_root=true with data.source=digits (audit11 A11-01: ignored)",
    CLI_ERROR,
    r"data\.allow_outside_root=true is read only by data\.source=image_folder or manifest, and this run's source is "
    r"digits",
)
def _shard_and_manifest_keys_on_digits(tmp):
    _upstream(tmp, "data.allow_outside_root=true", "data.shuffle_buffer=5")


# ------------------------------------------------------------------------------ A11-02, A11-03: augmentation, loader
@bad_input(
    "upstream",
    "data.crop_padding=4 data.crop_scale=0.9 (audit11 A11-02: the same metrics as crop_scale=0.1, the random "
    "translation replaces the resized crop)",
    CLI_ERROR,
    r"data\.crop_scale=0\.9 is read only by the random resized crop, which data\.crop_padding=4 replaces .*remove "
    r"data\.crop_scale .*data\.crop_scale=0\.08 restores its default\), or set data\.crop_padding=0",
)
def _crop_scale_with_padding(tmp):
    _upstream(tmp, "data.crop_padding=4", "data.crop_scale=0.9")


@bad_input(
    "upstream",
    "data.num_workers=3 with digits (loader auto: array) (audit11 A11-03: ignored by the array loader)",
    CLI_ERROR,
    r"data\.num_workers=3 is read only by the pil loader, and this run reads data\.source=digits with the array "
    r"loader .*remove data\.num_workers, or set data\.loader=pil",
)
def _workers_with_array_loader(tmp):
    _upstream(tmp, "data.num_workers=3")


# ------------------------------------------------------------------------------ A11-04: train and optim keys
@bad_input(
    "upstream",
    "train.fewshot_shots=[3] with the few-shot probe off (audit11 A11-04: saved in config.yaml, never read)",
    CLI_ERROR,
    r"train\.fewshot_shots=\[3\] is set but train\.fewshot_every is 0 \(off\).*set train\.fewshot_every=N .*or remove "
    r"train\.fewshot_shots",
)
def _shots_without_probe(tmp):
    _upstream(tmp, "train.fewshot_shots=[3]")


@bad_input(
    "upstream",
    "optim.cov_weight_decay=0.5 with a homoscedastic head (audit11 A11-04: the head has no covariance kernels)",
    CLI_ERROR,
    r"optim\.cov_weight_decay=0\.5 is the L2 weight of the covariance layers' kernels, and "
    r"model\.head\.covariance=none has none: remove optim\.cov_weight_decay, or choose a noisy covariance",
)
def _cov_decay_on_hom(tmp):
    _upstream(tmp, "optim.cov_weight_decay=0.5")


@handled(
    "upstream",
    "train.log_model=true with train.log_with=[] (audit11 A11-04 said unread: it exports the model into the run "
    "folder without a tracker)",
    r"pretrained/ written",
)
def _log_model_without_tracker(tmp):
    from harness.cli import main

    out = tmp / "r"
    quick = ["train.epochs=1", "data.limit_train=64", "data.limit_eval=32", "train.log_with=[]", f"output_dir={out}"]
    main(
        ["upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), *quick, "train.log_model=true"],
        standalone_mode=False,
    )
    export = out / "pretrained"
    assert (export / "config.json").is_file() and any(export.glob("*.safetensors"))
    return "pretrained/ written (config.json and the weights), no tracker needed"


# ------------------------------------------------------------------------------ A11-05: YAML's no
@handled(
    "upstream",
    "train.mixed_precision=no and =off, and mixed_precision: no in a YAML file (audit11 A11-05: YAML reads them as "
    "false: 'unknown mixed precision False ... use one of no, ...')",
    r"read as no",
)
def _precision_no(tmp):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig, validate

    (tmp / "c.yaml").write_text("train:\n  mixed_precision: no\n")
    seen = []
    for path, overrides in (
        (None, ["train.mixed_precision=no"]),
        (None, ["train.mixed_precision=off"]),
        (tmp / "c.yaml", []),
    ):
        cfg = load_config(UpstreamConfig, path, overrides)
        validate(cfg)
        seen.append(cfg.train.mixed_precision)
    assert seen == ["no", "no", "no"], seen
    return "no, off and a YAML file's no all read as no (fp32), kept as 'no' in the config"


@bad_input(
    "upstream",
    "train.mixed_precision=yes (YAML's true; audit11 A11-05's other half)",
    CLI_ERROR,
    r"mixed precision 'True' \(train\.mixed_precision\) is YAML's reading of yes / on / true, which names no "
    r"precision: give one of fp16, bf16, auto",
)
def _precision_yes(tmp):
    _upstream(tmp, "train.mixed_precision=yes")


# ------------------------------------------------------------------------------ A11-06: keys of an inactive section
@bad_input(
    "experiment",
    "grid_extensions=3 with no temperature_grid (audit11 A11-06: accepted, only hom trained, nothing extended)",
    ValueError,
    r"grid_extensions=3 is read only with temperature_grid of two values or more, with a noisy method, and this "
    r"experiment has none, so it would be ignored: remove grid_extensions",
)
def _grid_extensions_without_grid(tmp):
    _run(tmp, "grid_extensions=3")


@bad_input(
    "experiment",
    "budget.epochs=[1,2] without budget.methods (audit11 A11-06: accepted, no budget curve, no word)",
    ValueError,
    r"budget\.epochs=\[1, 2\] is read only with budget\.methods, and this experiment has none.*remove budget\.epochs, "
    r"or give budget\.methods",
)
def _budget_epochs_without_methods(tmp):
    _run(tmp, "budget.epochs=[1,2]")


@bad_input(
    "experiment",
    "frontier.methods=[hom] and frontier.reference=foo without frontier.schedules (audit11 A11-06: ignored)",
    ValueError,
    r"frontier\.methods=\['hom'\] is read only with frontier\.schedules, and this experiment has none",
)
def _frontier_without_schedules(tmp):
    _run(tmp, "frontier.methods=[hom]", "frontier.reference=foo")


@bad_input(
    "experiment",
    "multilabel.seeds=[0,1] without multilabel.methods (a variation of audit11 A11-06)",
    ValueError,
    r"multilabel\.seeds=\[0, 1\] is read only with multilabel\.methods, and this experiment has none",
)
def _multilabel_without_methods(tmp):
    _run(tmp, "multilabel.seeds=[0,1]")


# ------------------------------------------------------------------------------ A11-11: {} in a derived file
@handled(
    "config",
    "a config file with base: digits_hom.yaml and data: {label_noise: {}} (audit11 A11-11: the base's 30% pair-flip "
    "noise kept without a word, though the docs say {} is none)",
    r"label_noise \{\} in the file empties",
)
def _empty_mapping_in_file(tmp):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig

    base = load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml")
    assert base.data.label_noise, "the base config should carry label noise for this case"
    (tmp / "derived.yaml").write_text(f"base: {CONFIGS / 'digits_hom.yaml'}\ndata:\n  label_noise: {{}}\noptim: {{}}\n")
    cfg = load_config(UpstreamConfig, tmp / "derived.yaml")
    assert cfg.data.label_noise == {}, cfg.data.label_noise
    assert cfg.optim == base.optim  # an empty section ({} for a typed section) changes nothing
    again = load_config(UpstreamConfig, tmp / "derived.yaml", ["data.label_noise.kind=pair_flip"])
    assert again.data.label_noise == {"kind": "pair_flip"}, again.data.label_noise  # a later layer still counts
    return "label_noise {} in the file empties the base's noise; optim: {} keeps the section; later layers still count"


# ------------------------------------------------------------------------------ A11-14, A11-15: report, ensemble
@bad_input(
    "report",
    "harness report RUN --calibrators temperature,isotonic where no run has heldout_predictions.npz (audit11 A11-14: "
    "rc 0, an empty calibrators section)",
    CLI_ERROR,
    r"--calibrators temperature,isotonic: the calibrators are fitted on each entry's held-out predictions "
    r"\(heldout_predictions\.npz\), and no entry has them .*data\.heldout_split=val .*or leave out --calibrators",
)
def _calibrators_without_heldout(tmp):
    a, b = make_run(tmp / "a"), make_run(tmp / "b", seed=1)
    try:
        _cli("report", str(a), str(b), "--out-root", str(tmp / "rep"), "--calibrators", "temperature,isotonic")
    finally:
        assert not (tmp / "rep").exists(), "work started before the error"


@bad_input(
    "ensemble",
    "harness ensemble -m A -m B --out ens3 --name x (audit11 A11-15: rc 0, the name kept nowhere)",
    CLI_ERROR,
    r"--name x names the default folder runs/ensembles/x and is kept nowhere else, and --out .*ens3 gives the folder: "
    r"drop --name, or drop --out",
)
def _ensemble_name_with_out(tmp):
    a, b = make_run(tmp / "a"), make_run(tmp / "b", seed=1)
    try:
        _cli("ensemble", "-m", str(a), "-m", str(b), "--out", str(tmp / "ens3"), "--name", "x")
    finally:
        assert not (tmp / "ens3").exists(), "work started before the error"


# ------------------------------------------------------------------------------ A11-30..32: base, output_dir
@bad_input(
    "config",
    "a config whose base: names no file (audit11 A11-30: 'no config file at nothere.yaml', naming neither the file "
    "that includes it nor where it was looked for)",
    FileNotFoundError,
    r"nob\.yaml: base: nothere\.yaml names no file \(looked for .*/nothere\.yaml; a base is a path relative to the "
    r"file that names it\): fix the path",
)
def _base_missing(tmp):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig

    (tmp / "nob.yaml").write_text("base: nothere.yaml\n")
    load_config(UpstreamConfig, tmp / "nob.yaml")


@bad_input(
    "config",
    "base: [a.yaml] (a list) (audit11 A11-30: 'no config file at \"['a.yaml']\"')",
    ValueError,
    r"bl\.yaml: base: \['a\.yaml'\] must be one path .*give one file",
)
def _base_list(tmp):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig

    (tmp / "bl.yaml").write_text("base: [a.yaml]\n")
    load_config(UpstreamConfig, tmp / "bl.yaml")


@bad_input(
    "upstream",
    "output_dir= (empty) (audit11 A11-31: trained into the default runs/upstream/<name>, where an earlier run may sit)",
    CLI_ERROR,
    r"override output_dir= gives output_dir no value \(it would be read as null.*give a value, or output_dir=null",
)
def _output_dir_empty(tmp):
    _upstream_alone(tmp, "output_dir=")


@bad_input(
    "upstream",
    "output_dir=$HOME/h11run, quoted (audit11 A11-32: a folder literally named $HOME made in the current folder)",
    CLI_ERROR,
    r"output_dir='\$HOME/h11run' holds a \$: nothing expands variables .*write the folder out",
)
def _output_dir_dollar(tmp):
    _upstream_alone(tmp, "output_dir=$HOME/h11run")


def _upstream_alone(tmp, *overrides: str) -> None:
    """``harness upstream --config digits_hom.yaml OVERRIDES`` from ``tmp`` (the overrides give output_dir); it must
    refuse before any folder is made there."""
    import os

    from harness.cli import main

    before, cwd = set(tmp.iterdir()), os.getcwd()
    os.chdir(tmp)
    try:
        main(
            ["upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), *overrides],
            standalone_mode=False,
        )
    finally:
        os.chdir(cwd)
        assert set(tmp.iterdir()) == before, "a folder was made before the error"


@handled(
    "upstream",
    "output_dir=~/NAME, quoted or in a YAML file (audit11 A11-32: ran in ./~/NAME, printing 'run folder: ~/NAME')",
    r"the home folder",
)
def _output_dir_tilde(tmp):
    import os

    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig, validate

    cfg = load_config(UpstreamConfig, None, ["output_dir=~/h11run"])
    validate(cfg)
    assert cfg.output_dir == os.path.join(os.path.expanduser("~"), "h11run"), cfg.output_dir
    assert "~" not in str(cfg.run_dir), cfg.run_dir
    return "~/h11run read as the home folder's h11run (validate expands it; nothing is made)"


# ------------------------------------------------------------------------------ A11-26: splits of other classes
@bad_input(
    "upstream",
    "image_folder whose test split lacks class b (audit11 A11-26: 'differ in classes or label type', naming neither "
    "the classes nor the folders, with no fix)",
    CLI_ERROR,
    r"train split 'train' \(.*imf.*\) and eval split 'test' \(.*\) differ in classes \(the eval split lacks 'b'\): "
    r"every split needs every class.*add the missing class, with images of it",
)
def _image_folder_classes_differ(tmp):
    image_folder_upstream(tmp, {"train": "abcd", "test": "acd"})


def image_folder_upstream(tmp, classes: "dict[str, str]", empty: "tuple[str, ...]" = ()) -> None:
    """``harness upstream`` (one epoch, 16 px) on an image folder ``tmp/imf`` holding 4 images of each class of
    ``classes`` (split -> class letters) and the empty class folders ``empty`` (``"train/c"``), into ``tmp/r``: it
    must refuse as the data is read, before any work (the run folder holds its lock alone)."""
    from PIL import Image

    from harness.cli import main

    for split, letters in classes.items():
        for c in letters:
            (tmp / "imf" / split / c).mkdir(parents=True)
            for i in range(4):
                Image.new("RGB", (16, 16), (i * 40, 0, 0)).save(tmp / "imf" / split / c / f"{i}.png")
    for folder in empty:
        (tmp / "imf" / folder).mkdir(parents=True)
    settings = ["data.source=image_folder", f"data.path={tmp / 'imf'}", "data.label_noise=null", "data.image_size=16"]
    settings += ["data.eval_resize=16", "data.batch_size=4", "data.heldout_split=null", "train.epochs=1"]
    try:
        main(
            [
                "upstream",
                "--no-progress",
                "--config",
                str(CONFIGS / "digits_hom.yaml"),
                *settings,
                f"output_dir={tmp / 'r'}",
            ],
            standalone_mode=False,
        )
    finally:  # the data is read under the run folder's lock: the lock alone is there
        assert {f.name for f in (tmp / "r").iterdir()} <= {".lock"}, "work started before the error"


@handled(
    "downstream",
    "--slurm slurm_use_srun=false (helper's note on audit11 A11-23: the text 'false' reached submitit, which reads any "
    "non-empty text as true)",
    r"read as the switch false",
)
def _slurm_switch_false(tmp):
    from harness.training.slurm import slurm_parameters

    got = slurm_parameters(["slurm_use_srun=false", "stderr_to_stdout=True", "timeout_min=60", "slurm_partition=gpu"])
    assert got == {"slurm_use_srun": False, "stderr_to_stdout": True, "timeout_min": 60, "slurm_partition": "gpu"}, got
    return "slurm_use_srun=false read as the switch false (True as true), numbers as numbers, names as text"
