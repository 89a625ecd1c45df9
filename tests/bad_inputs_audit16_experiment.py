"""Bad inputs found by the sixteenth reliability audit in the experiment file (``audit16 <case id>``): what a planned
run reads (its data, backbone, weights file, number of classes) checked alike for every run, a condition's, a
frontier schedule's, a grid run's and a second method's as the main study's first run's, before any work."""

from __future__ import annotations

from bad_inputs_audit8_experiment import TINY
from bad_inputs_audit12_plan import _run as _experiment

from bad_inputs import bad_input

#: the tiny experiment's upstream overrides, to which a case adds one
_TINY_OVERRIDES = "data.limit_eval=64]"


def _tiny_with(override: str) -> str:
    """The tiny experiment with ``override`` added to its ``upstream_overrides`` (the main study's every run)."""
    assert _TINY_OVERRIDES in TINY
    return TINY.replace(_TINY_OVERRIDES, f"data.limit_eval=64, {override}]")


# ------------------------------------------------------------------------------ A16-04: every planned run's inputs
@bad_input(
    "experiment",
    "a condition with upstream_overrides [data.source=cifar10n] and no data.path (audit16 A16-04: accepted; the main "
    "study trained, then the condition's run failed 'data.path is required for source cifar10n')",
    ValueError,
    r"^conditions\.c1, method hom, seed 0: data\.path is required for source 'cifar10n': set it to the cifar10n folder",
)
def _condition_data_without_path(tmp):
    _experiment(
        tmp,
        "tc",
        "conditions: {c1: {description: x, upstream_overrides: [data.source=cifar10n], methods: [hom], seeds: [0]}}\n",
    )


@bad_input(
    "experiment",
    "a condition with [data.source=image_folder, data.path=/nonexistent] (audit16 A16-04: accepted; its run failed "
    "only after the main study had trained)",
    FileNotFoundError,
    r"^conditions\.c1, method hom, seed 0: data\.path '/nonexistent' does not exist; set data\.path to a folder",
)
def _condition_data_absent(tmp):
    _experiment(
        tmp,
        "tci",
        "conditions: {c1: {description: x, upstream_overrides: [data.source=image_folder, data.path=/nonexistent], "
        "methods: [hom], seeds: [0]}}\n",
    )


@bad_input(
    "experiment",
    "a condition with [model.backbone=nonexistent_net] (audit16 A16-04: accepted; its run failed 'unknown backbone' "
    "only after the main study had trained)",
    ValueError,
    r"^conditions\.c1: method 'hom': model\.backbone=nonexistent_net: unknown backbone 'nonexistent_net': not a "
    r"timm model .*Give the name of a timm model, or torchvision:NAME",
)
def _condition_unknown_backbone(tmp):
    _experiment(
        tmp,
        "tcb",
        "conditions: {c1: {description: x, upstream_overrides: [model.backbone=nonexistent_net], methods: [hom], "
        "seeds: [0]}}\n",
    )


@bad_input(
    "experiment",
    "frontier.schedules.a=[model.backbone=nonexistent_net] (audit16 A16-04: accepted; the main study trained, then "
    "the schedule's run failed 'unknown backbone nonexistent_net: not a timm model')",
    ValueError,
    r"^frontier\.schedules\.a: method 'hom': model\.backbone=nonexistent_net: unknown backbone 'nonexistent_net'",
)
def _frontier_unknown_backbone(tmp):
    _experiment(tmp, "tfb", "frontier: {method: hom, schedules: {a: [model.backbone=nonexistent_net]}}\n")


@bad_input(
    "experiment",
    "upstream_overrides [..., model.backbone=nonexistent_net] in the main study (audit16 A16-04: accepted, the first "
    "job failed)",
    ValueError,
    r"^method 'hom': model\.backbone=nonexistent_net: unknown backbone 'nonexistent_net': not a timm model",
)
def _main_unknown_backbone(tmp):
    _experiment(tmp, "tmb", "", _tiny_with("model.backbone=nonexistent_net"))


@bad_input(
    "experiment",
    "upstream_overrides [..., model.pretrained_file=/nonexistent.pt] (audit16 A16-04: accepted, the first job failed "
    "'pretrained_file does not exist')",
    ValueError,
    r"^method 'hom': model\.pretrained_file=/nonexistent\.pt is not a file: give a local file of the backbone's weights "
    r".*or unset model\.pretrained_file",
)
def _main_pretrained_file_absent(tmp):
    _experiment(tmp, "tmp", "", _tiny_with("model.pretrained_file=/nonexistent.pt"))


@bad_input(
    "experiment",
    "a second method whose own overrides set data.source=cifar10n without data.path (found with audit16 A16-04: "
    "accepted, only the study's first run's data was read; its runs failed at their turn)",
    ValueError,
    r"^run het_s0: data\.path is required for source 'cifar10n'",
)
def _second_method_data_without_path(tmp):
    methods = (
        "methods: {hom: {covariance: none}, het: {covariance: low_rank, num_factors: 2, overrides: "
        "[data.source=cifar10n]}}"
    )
    _experiment(tmp, "tm2", "", TINY.replace("methods: {hom: {covariance: none}}", methods))


@bad_input(
    "experiment",
    "grid_overrides [model.backbone=nonexistent_net] of a τ grid's runs (found with audit16 A16-04: accepted, the "
    "grid runs failed at their turn)",
    ValueError,
    r"^method 'het': model\.backbone=nonexistent_net: unknown backbone 'nonexistent_net'",
)
def _grid_run_unknown_backbone(tmp):
    tiny = TINY.replace("methods: {hom: {covariance: none}}", "methods: {het: {covariance: low_rank, num_factors: 2}}")
    tiny = tiny.replace(_TINY_OVERRIDES, "data.limit_eval=64, data.heldout_split=val]")
    _experiment(tmp, "tgb", "temperature_grid: [0.5, 1.0]\ngrid_overrides: [model.backbone=nonexistent_net]\n", tiny)


@bad_input(
    "experiment",
    "a condition with [model.num_classes=7] on 10-class data (found with audit16 A16-04: accepted, only the main "
    "study's runs were checked against the data's classes)",
    ValueError,
    r"^conditions\.c1, method hom, seed 0: model\.num_classes=7 but the data has 10 classes; leave model\.num_classes "
    r"unset",
)
def _condition_num_classes(tmp):
    _experiment(
        tmp,
        "tck",
        "conditions: {c1: {description: x, upstream_overrides: [model.num_classes=7], methods: [hom], seeds: [0]}}\n",
    )
