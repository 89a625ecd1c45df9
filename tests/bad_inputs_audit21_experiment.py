"""Bad inputs found by the twenty-first reliability audit in the experiment file (``audit21 <case id>``): the head's
options that only its evaluation or its memory reads (``eval_seed``, ``mc_chunk_size``, ``eval_mc_samples``) set as
a condition, a frontier schedule, a tune or the one difference of two methods: each changes nothing a run trains.
Every refusal comes before any work."""

from __future__ import annotations

from pathlib import Path

from bad_inputs_audit8_experiment import _run

from bad_inputs import bad_input

_HET = "covariance: low_rank, num_factors: 4, train_mc_samples: 10, eval_mc_samples: 10"
_METHODS = f"methods={{hom: {{covariance: none}}, het: {{{_HET}}}}}"
_SEED = r"the seed of a noisy head's evaluation noise, not what a run trains"
_CHUNK = r"how many of a noisy head's samples are drawn at once \(its peak memory\), not what a run trains"
_EVAL = r"how many Monte Carlo samples a noisy head averages in evaluation, not what a run trains"


def _condition(tmp: Path, override: str) -> None:
    cond = f'conditions={{c: {{description: x, upstream_overrides: ["{override}"], methods: [het], seeds: [0]}}}}'
    _run(tmp, _METHODS, cond)


# ------------------------------------------------------------- A21-12: head options that only evaluation/memory read
@bad_input(
    "experiment",
    "a condition with upstream_overrides [model.head.eval_seed=3] for a het method (audit21 A21-12: accepted, the "
    "main study's het trained again and reported as a condition, differing by evaluation noise)",
    ValueError,
    rf"^conditions\.c\.upstream_overrides=\[model\.head\.eval_seed=3\] changes nothing: model\.head\.eval_seed sets "
    rf"{_SEED}, so the runs of condition c would be the main study's",
)
def _condition_of_eval_seed(tmp):
    _condition(tmp, "model.head.eval_seed=3")


@bad_input(
    "experiment",
    "a condition with upstream_overrides [model.head.mc_chunk_size=5] for a het method (audit21 A21-12: accepted, "
    "the main study's het trained again; the chunk size only sets the head's memory)",
    ValueError,
    rf"^conditions\.c\.upstream_overrides=\[model\.head\.mc_chunk_size=5\] changes nothing: model\.head\.mc_chunk_size "
    rf"sets {_CHUNK}, so the runs of condition c would be the main study's",
)
def _condition_of_chunk_size(tmp):
    _condition(tmp, "model.head.mc_chunk_size=5")


@bad_input(
    "experiment",
    "a condition with upstream_overrides [model.head={eval_seed: 3}] (the section spelling) for a het method (audit21 "
    "A21-12: accepted)",
    ValueError,
    rf"^conditions\.c\.upstream_overrides=\[model\.head=\{{eval_seed: 3\}}\] changes nothing: model\.head\.eval_seed "
    rf"sets {_SEED}",
)
def _condition_of_head_section(tmp):
    _condition(tmp, "model.head={eval_seed: 3}")


@bad_input(
    "experiment",
    "a frontier schedule [model.head.mc_chunk_size=5] (audit21 A21-12: refused with another message than a "
    "condition's, 'not a training schedule's setting ... study other data as a condition')",
    ValueError,
    rf"^frontier\.schedules\.a sets model\.head\.mc_chunk_size \(model\.head\.mc_chunk_size=5\), which changes nothing "
    rf"a run trains: model\.head\.mc_chunk_size sets {_CHUNK}; .*remove model\.head\.mc_chunk_size from "
    r"frontier\.schedules\.a$",
)
def _schedule_of_chunk_size(tmp):
    _run(tmp, _METHODS, "frontier={methods: [het], schedules: {a: [model.head.mc_chunk_size=5]}}")


@bad_input(
    "experiment",
    "a method's tune of model.head.eval_seed (audit21 A21-12: refused only as 'a head option', not as a setting that "
    "changes nothing a run trains)",
    ValueError,
    rf"^method 'het': tune\.key model\.head\.eval_seed sets {_SEED}; tune a training setting$",
)
def _tune_of_eval_seed(tmp):
    _run(tmp, f"methods={{het: {{{_HET}, tune: {{key: model.head.eval_seed, values: [1, 2]}}}}}}")


@bad_input(
    "experiment",
    "two methods that differ only in mc_chunk_size (audit21 A21-12: accepted, one model trained twice and reported "
    "as two methods)",
    ValueError,
    rf"^methods het and het2 differ only in model\.head\.mc_chunk_size \(unset vs 5: it sets {_CHUNK}\), so they "
    r"would train the same model twice",
)
def _methods_apart_by_chunk_size(tmp):
    _run(tmp, f"methods={{het: {{{_HET}}}, het2: {{{_HET}, mc_chunk_size: 5}}}}")


@bad_input(
    "experiment",
    "two multi-label methods that differ only in eval_mc_samples (audit21 A21-12: accepted, one model trained twice "
    "and compared with itself under another evaluation)",
    ValueError,
    rf"^multilabel\.methods het and het2 differ only in model\.head\.eval_mc_samples \(10 vs 20: it sets {_EVAL}\)",
)
def _multilabel_methods_apart_by_eval_samples(tmp):
    het = "covariance: low_rank, num_factors: 4, train_mc_samples: 10, link: sigmoid"
    _run(
        tmp,
        "multilabel={upstream_overrides: [train.best_metric=sigmoid_nll], seeds: [0], methods: "
        f"{{het: {{{het}, eval_mc_samples: 10}}, het2: {{{het}, eval_mc_samples: 20}}}}}}",
    )
