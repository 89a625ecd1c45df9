"""An optional noisy transfer head (``--head diag|het|pe``): τ in the val200 selection, τ in the run keys, the
fine-tuned head, its MC-averaged predictions, unchanged hom keys, and bad input refused before any run."""

import json
import re
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import harness.downstream.finetune as ft
from harness.cli import main
from harness.downstream.config import DEFAULT_TEMPERATURES, SweepSettings
from harness.downstream.sweep import _key, append_record, read_records, sweep
from harness.heads import HeteroscedasticHead
from harness.models import build_model, save_model
from harness.tasks.demo import DEMO_TASKS, demo_split

TINY = dict(lrs=[0.05], steps=[10], seeds=1, batch_size=32, micro_batch=32, resolution=[32, 32])
CLI_TINY = [
    "--lrs",
    "0.05",
    "--steps",
    "10",
    "--seeds",
    "1",
    "--batch-size",
    "32",
    "--micro-batch",
    "32",
    "--resolution",
    "32,32",
]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    model = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="low_rank", num_factors=3)))
    return str(save_model(model, tmp_path_factory.mktemp("up") / "model.pt"))


class _Capture:
    """Wraps ``harness.downstream.finetune.transfer_model``: each run's fresh model (fine-tuned in place) and head options."""

    def __init__(self):
        self.runs, self._orig = [], ft.transfer_model

    def __call__(self, upstream, num_classes, head_kwargs=None):
        model = self._orig(upstream, num_classes, head_kwargs)
        self.runs.append((head_kwargs, model))
        return model


@pytest.fixture(scope="module")
def het_sweep(upstream, tmp_path_factory):
    """``harness downstream --head het --temperatures 0.5,2`` on demo_rotation (K = 4): 2 selection runs, 1 final."""
    out = tmp_path_factory.mktemp("het")
    capture = _Capture()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ft, "transfer_model", capture)
        res = CliRunner().invoke(
            main,
            [
                "downstream",
                "--upstream",
                upstream,
                "--tasks",
                "demo_rotation",
                *CLI_TINY,
                "--head",
                "het",
                "--temperatures",
                "0.5,2",
                "--out",
                str(out),
            ],
        )
    assert res.exit_code == 0, res.output
    return out, capture.runs, res.output


def test_het_sweep_chooses_tau_on_val200_and_fine_tunes_a_het_head(het_sweep, upstream):
    out, runs, output = het_sweep
    records = read_records(out / "runs.jsonl")
    select = {r["temperature"]: r for r in records.values() if r["phase"] == "select"}
    assert set(select) == {0.5, 2.0} and all(r["split"] == "val200" and r["head"] == "het" for r in select.values())
    for tau, r in select.items():  # τ is in the key, so each τ is its own run on resume
        assert r["key"] == f"demo_rotation|select|lr=0.05|steps=10|seed=0|tau={tau:g}"
    # the val200 criterion recomputed from runs.jsonl: highest accuracy, then lowest NLL, then smaller τ
    best = min(select, key=lambda t: (-select[t]["accuracy"], select[t]["nll"], t))
    (final,) = [r for r in records.values() if r["phase"] == "final"]
    assert final["temperature"] == best and final["split"] == "test"
    assert final["key"] == f"demo_rotation|final|lr=0.05|steps=10|seed=0|tau={best:g}"
    vtab = json.loads((out / "vtab.json").read_text())
    assert vtab["tasks"]["demo_rotation"]["temperature"] == best
    assert vtab["recipe"]["head"] == "het" and vtab["recipe"]["temperatures"] == [0.5, 2.0]
    assert vtab["recipe"]["chosen_temperatures"] == {"demo_rotation": best}
    md = (out / "vtab.md").read_text()
    assert "beyond the paper's Table 6 protocol (fresh homoscedastic head)" in md
    assert f"demo_rotation τ = {best:g}" in md and "(lr, steps, τ) chosen on val200" in md
    assert "tau=0.5" in output and "tau=2" in output
    # the fine-tuned models: a low-rank head at each run's τ, R = min(6, K) = 4, the upstream MC samples
    assert [kw["temperature"] for kw, _ in runs] == [0.5, 2.0, best]
    head = runs[-1][1].head
    assert isinstance(head, HeteroscedasticHead) and head.covariance_type == "low_rank"
    assert float(head.temperature) == best and head.num_factors == 4 and head.num_classes == 4
    assert (head.train_mc_samples, head.eval_mc_samples) == (100, 1000)
    assert head.loc.weight.abs().sum() > 0  # it was fine-tuned from its zero initialisation
    # a rerun resumes every run from its τ key: nothing is trained again
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("harness.downstream.sweep.run_one", pytest.fail)  # no run is trained again
        again = sweep(
            upstream,
            ["demo_rotation"],
            out,
            SweepSettings(**TINY, head="het", temperatures=[0.5, 2]),
            progress=lambda line: None,
        )
    assert again["tasks"] == vtab["tasks"]


def test_het_predictions_are_mc_averaged_probabilities(het_sweep, upstream, monkeypatch):
    from harness.uncertainty.predictions import Predictions

    out, _, _ = het_sweep
    saved = Predictions.load(out / "predictions" / "demo_rotation_seed0.npz")
    logp = saved.log_probs()
    np.testing.assert_allclose(np.exp(logp).sum(1), 1.0, atol=1e-6)
    np.testing.assert_allclose(saved.logits, logp, atol=1e-5)  # stored as log p̄, already normalised
    # one fine-tune, its predictions against the head's own MC average over the same evaluation images
    seen = {}
    orig = ft.predict

    def capture(model, data, loader, *args, **kwargs):
        seen.update(model=model, loader=loader, preds=orig(model, data, loader, *args, **kwargs))
        return seen["preds"]

    monkeypatch.setattr(ft, "predict", capture)
    task = DEMO_TASKS["demo_rotation"]
    cfg = ft.FinetuneConfig(
        lr=0.05,
        steps=4,
        batch_size=32,
        micro_batch=32,
        resolution=(32, 32),
        head="het",
        temperature=1.5,
        eval_mc_samples=200,
    )
    ft.finetune(upstream, demo_split(task, "train800"), demo_split(task, "val200"), cfg, task.flip, task.crop)
    model, preds = seen["model"], seen["preds"]
    assert float(model.head.temperature) == 1.5 and model.head.eval_mc_samples == 200
    means, plain = [], []
    with torch.no_grad():
        for x, _, _ in seen["loader"]:
            h = model.pre_logits(x)
            z = model.head.sample_logits(h)  # [B, S, K]: the eval samples, already divided by τ
            assert z.shape[1] == 200
            means.append(torch.softmax(z, -1).mean(1).numpy())
            plain.append(torch.softmax(model.head.mean_logits(h) / 1.5, -1).numpy())
    p_bar, p_mean = np.concatenate(means), np.concatenate(plain)
    p = np.exp(preds.log_probs())
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-9)
    np.testing.assert_allclose(p, p_bar, atol=1e-5)
    assert np.abs(p - p_mean).max() > 1e-3  # the noise matters: not the softmax of the mean logits


def test_transfer_model_het_head_has_zero_mean_layer_and_default_covariance_init(upstream):
    opts = ft.head_options("pe", 2, temperature=3.0)
    assert opts["covariance"] == "parameter_efficient" and opts["num_factors"] == 2  # min(6, K) on a 2-class task
    model = ft.transfer_model(upstream, 2, opts)
    head = model.head
    assert head.covariance_type == "parameter_efficient" and float(head.temperature) == 3.0
    assert head.loc.weight.abs().sum() == 0 and head.loc.bias.abs().sum() == 0
    assert head.scale_het.weight.abs().sum() > 0 and head.diag.weight.abs().sum() > 0  # Glorot, not zero
    assert ft.head_options("hom", 10) == {} and ft.head_options("diag", 10)["covariance"] == "diagonal"
    assert "num_factors" not in ft.head_options("diag", 10)


def _run_lines(lines: "list[str]") -> "list[str]":
    """The progress lines of fine-tuning runs done (``[downstream] 2/2 TASK final ... accuracy 0.09``), not the model
    load, the phases or a slow run's step lines (``[downstream] 1/2 TASK final lr=0.05: 7/10 steps``, every 15 s)."""
    return [line for line in lines if re.match(r"\[downstream\] \d+/\d+ ", line) and " accuracy " in line]


def test_noisy_selection_breaks_accuracy_ties_by_val200_nll(upstream, tmp_path):
    settings = SweepSettings(**TINY, head="diag", temperatures=[0.5, 1, 2])
    store = tmp_path / "runs.jsonl"
    fake = {
        "demo_rotation": {0.5: (0.5, 1.2), 1.0: (0.4, 0.3), 2.0: (0.5, 0.9)},  # tie at 0.5: lower NLL (τ 2)
        "demo_position": {0.5: (0.3, 2.0), 1.0: (0.6, 2.5), 2.0: (0.3, 1.0)},
    }  # accuracy first (τ 1)
    for task, by_tau in fake.items():
        for tau, (acc, nll) in by_tau.items():
            append_record(
                store,
                {
                    "key": _key(task, "select", 0.05, 10, 0, tau),
                    "task": task,
                    "phase": "select",
                    "lr": 0.05,
                    "steps": 10,
                    "seed": 0,
                    "split": "val200",
                    "accuracy": acc,
                    "nll": nll,
                    "head": "diag",
                    "temperature": tau,
                },
            )
    lines = []
    result = sweep(upstream, list(fake), tmp_path, settings, progress=lines.append)
    runs = _run_lines(lines)
    assert len(runs) == 2 and all(" final " in line for line in runs)  # only the finals ran
    assert result["tasks"]["demo_rotation"]["temperature"] == 2.0
    assert result["tasks"]["demo_position"]["temperature"] == 1.0


def test_hom_sweep_keys_and_records_are_those_of_older_sweeps(upstream, tmp_path):
    assert _key("dtd", "final", 0.001, None, 2) == "dtd|final|lr=0.001|steps=rule|seed=2"
    settings = SweepSettings(lrs=[0.05], steps=[5, 10], seeds=1, batch_size=32, micro_batch=32, resolution=[32, 32])
    old = {
        k: v
        for k, v in asdict(settings).items()
        if k not in ("head", "temperatures", "num_factors", "train_mc_samples", "eval_mc_samples")
    }
    (tmp_path / "sweep.json").write_text(json.dumps({"upstream": str(Path(upstream).resolve()), "settings": old}))
    for steps, acc in ((5, 0.3), (10, 0.6)):  # selection records as an older version wrote them: no NLL, no τ
        append_record(
            tmp_path / "runs.jsonl",
            {
                "key": f"demo_digit|select|lr=0.05|steps={steps}|seed=0",
                "task": "demo_digit",
                "group": "demo",
                "phase": "select",
                "lr": 0.05,
                "steps": steps,
                "seed": 0,
                "split": "val200",
                "accuracy": acc,
                "data": [{"format": "demo"}],
            },
        )
    lines = []
    result = sweep(upstream, ["demo_digit"], tmp_path, settings, progress=lines.append)
    runs = _run_lines(lines)
    assert len(runs) == 1 and "final" in runs[0] and "tau" not in runs[0]  # the old records were reused
    records = read_records(tmp_path / "runs.jsonl")
    assert set(records) == {
        "demo_digit|select|lr=0.05|steps=5|seed=0",
        "demo_digit|select|lr=0.05|steps=10|seed=0",
        "demo_digit|final|lr=0.05|steps=10|seed=0",
    }
    assert not {"temperature", "head"} & set(records["demo_digit|final|lr=0.05|steps=10|seed=0"])
    assert "temperature" not in result["tasks"]["demo_digit"] and result["recipe"]["head"] == "hom"
    assert "temperatures" not in result["recipe"] and "chosen_temperatures" not in result["recipe"]
    md = (tmp_path / "vtab.md").read_text()
    assert "Fresh zero-initialised linear head; SGD" in md and "Table 6 protocol" not in md


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(head="hetero"), "unknown head 'hetero' \\(--head\\): use one of hom, diag, het, pe"),
        (dict(head="HET"), "unknown head 'HET'"),
        (dict(head="het", temperatures=[0.0, 1.0]), "each a finite number at least 0.001"),
        (dict(head="het", temperatures=[1.0, float("nan")]), "each a finite number at least 0.001"),
        (dict(head="pe", temperatures=[]), "non-empty list"),
        (dict(head="het", temperatures=[1, 1.0]), "repeat a value"),
        (dict(head="diag", temperatures="1,2"), "non-empty list"),
        (dict(temperatures=[1.0]), "only apply to a noisy head: add --head diag, het or pe"),
        (dict(num_factors=3), "num_factors only apply to a noisy head"),
        (dict(head="het", num_factors=0), "num_factors must be a whole number >= 1"),
        (dict(head="het", eval_mc_samples=2.5), "eval_mc_samples must be a whole number >= 1"),
    ],
)
def test_bad_head_settings_name_the_fix(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SweepSettings(**TINY, **kwargs)


def test_bad_head_on_the_command_line_fails_before_any_run(upstream, tmp_path, monkeypatch):
    monkeypatch.setattr("harness.downstream.sweep.run_one", pytest.fail)
    for extra, match in (
        (["--head", "bogus"], "unknown head 'bogus'"),
        (["--head", "het", "--temperatures", "0.5,-1"], "each a finite number at least 0.001"),
        (["--head", "het", "--temperatures", "warm"], "--temperatures 'warm': expected"),
        (["--temperatures", "1,2"], "only apply to a noisy head"),
    ):
        res = CliRunner().invoke(
            main,
            [
                "downstream",
                "--upstream",
                upstream,
                "--tasks",
                "demo_digit",
                *CLI_TINY,
                *extra,
                "--out",
                str(tmp_path / "out"),
            ],
        )
        assert res.exit_code != 0 and match in res.output, res.output
        assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="unknown head 'xl'"):
        ft.head_options("xl", 10)
    assert SweepSettings(**TINY, head="het").temperatures == list(DEFAULT_TEMPERATURES)
