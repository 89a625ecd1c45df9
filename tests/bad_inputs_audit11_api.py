"""Bad inputs found by the eleventh reliability audit in the Python API (``audit11 <case id>``): ``fit_temperature``
bounds given as a NumPy array or torch tensor, ``calibration.scale`` of a ``Fraction`` or ``Decimal`` temperature,
``Predictions`` class names given as one string or as ints, and ``hetify`` of a model in ``eval()`` mode."""

from __future__ import annotations

import warnings

import numpy as np
import torch

from bad_inputs import bad_input, handled


def _preds(n: int = 20, k: int = 4, **kw):
    from harness.uncertainty.predictions import Predictions

    rng = np.random.default_rng(0)
    args = {"class_names": list("abcd"), "link": "softmax", **kw}
    return Predictions(logits=rng.normal(size=(n, k)), targets=rng.integers(0, k, n), index=np.arange(n), **args)


# ------------------------------------------------------------------------------------------------ calibration
@handled(
    "uncertainty",
    "fit_temperature(P, bounds=np.array([0.1, 10.0])) and bounds=torch.tensor([0.1, 10.0]) (audit11 A11-19: NumPy "
    "bounds: a fit that ran to the bound then raised TypeError 'unsupported format string passed to "
    "numpy.ndarray.__format__', losing the fitted T; torch bounds: 'each a finite number at least 0.001 ...', the "
    "wrong reason)",
    r"NumPy and torch bounds give the tuple's T; at a bound: T = 2 with the warning \(.*at the lower bound 2 of "
    r"bounds=\(2, 10\)",
)
def _fit_temperature_array_bounds(tmp):
    from harness.uncertainty.calibration import fit_temperature

    p = _preds()
    free = fit_temperature(p, bounds=(0.1, 10.0))  # T about 1.03: inside the bounds
    assert np.isclose(fit_temperature(p, bounds=np.array([0.1, 10.0])), free)
    assert np.isclose(fit_temperature(p, bounds=torch.tensor([0.1, 10.0])), free, rtol=1e-6)
    got, said = {}, {}
    for kind, bounds in (  # T = 1.03 is below 2: the fit ends at the lower bound, and warns
        ("tuple", (2.0, 10.0)),
        ("numpy", np.array([2.0, 10.0])),
        ("torch", torch.tensor([2.0, 10.0])),
        ("scalars", (np.float32(2.0), torch.tensor(10.0))),
    ):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got[kind] = fit_temperature(p, bounds=bounds)
        said[kind] = str(w[-1].message) if w else ""
        assert isinstance(got[kind], float), type(got[kind])
    assert len(set(got.values())) == 1 and np.isclose(got["tuple"], 2.0, rtol=1e-5), got
    assert len(set(said.values())) == 1 and "bounds=(2, 10)" in said["torch"], said
    try:
        fit_temperature(p, bounds=np.array([10.0, 0.1]))
    except ValueError as e:
        assert "with lower < upper" in str(e), e
    else:
        raise AssertionError("bounds (10, 0.1) were taken")
    at = f"T = {got['numpy']:g} with the warning ({said['numpy'][:90]})"
    return f"NumPy and torch bounds give the tuple's T; at a bound: {at}"


@handled(
    "uncertainty",
    "calibration.scale(P, fractions.Fraction(1, 2)) and scale(P, decimal.Decimal('2')) (audit11 A11-20: Fraction: "
    "TypeError 'unsupported format string passed to Fraction.__format__'; Decimal: 'temperature must be a finite "
    "number', the wrong reason)",
    r"Fraction\(1, 2\) and Decimal\('2'\) taken as T = 0\.5 and 2 \(source '.*\(T=0\.500\)'\); Decimal\('NaN'\): "
    r"temperature must be a finite number",
)
def _scale_fraction_decimal(tmp):
    import decimal
    import fractions

    from harness.uncertainty.calibration import scale

    p = _preds()
    half, two = scale(p, fractions.Fraction(1, 2)), scale(p, decimal.Decimal("2"))
    assert np.allclose(half.logits, p.logits * 2) and np.allclose(two.logits, p.logits / 2)
    for bad in (decimal.Decimal("sNaN"), decimal.Decimal("Infinity"), True, "2"):
        _refusal(scale, p, bad)
    said = str(_refusal(scale, p, decimal.Decimal("NaN")))
    return (
        f"Fraction(1, 2) and Decimal('2') taken as T = 0.5 and 2 (source {half.source!r}); Decimal('NaN'): "
        f"{said.split(', got')[0]}"
    )


def _refusal(f, *args) -> BaseException:
    try:
        f(*args)
    except ValueError as e:
        return e
    raise AssertionError(f"{f.__name__}{args[1:]!r} was taken")


# ------------------------------------------------------------------------------------------------ predictions
@bad_input(
    "uncertainty",
    "Predictions(..., class_names='abcd') (audit11 A11-21: one string taken as four classes 'a', 'b', 'c', 'd')",
    ValueError,
    r"Predictions class_names='abcd' is one str: give a list of K = 4 names, one per logit column, e.g. "
    r"\[str\(k\) for k in range\(logits\.shape\[1\]\)\] \(or \['a', 'b', 'c', 'd'\] if each character is a class\)",
)
def _class_names_one_string(tmp):
    try:
        _preds(class_names=b"abcd")
    except ValueError as e:
        assert "is one bytes" in str(e), e
    else:
        raise AssertionError("class_names=b'abcd' was taken")
    _preds(class_names="abcd")


@handled(
    "uncertainty",
    "Predictions(..., class_names=(0, 1, 2, 3)), saved and loaded (audit11 A11-21: ints in memory, ['0', '1', '2', "
    "'3'] after the round trip)",
    r"class_names \['0', '1', '2', '3'\] in memory and after save/load; a NumPy str array: \['a', 'b', 'c', 'd'\]",
)
def _class_names_ints_round_trip(tmp):
    from harness.uncertainty.predictions import Predictions

    p = _preds(class_names=(0, 1, 2, 3))
    p.save(tmp / "p.npz")
    back = Predictions.load(tmp / "p.npz")
    assert p.class_names == back.class_names == ["0", "1", "2", "3"], (p.class_names, back.class_names)
    assert all(type(c) is str for c in p.class_names)
    arr = _preds(class_names=np.array(list("abcd"))).class_names
    assert arr == list("abcd") and all(type(c) is str for c in arr), arr
    return f"class_names {p.class_names} in memory and after save/load; a NumPy str array: {arr}"


# ------------------------------------------------------------------------------------------------ hetify
@handled(
    "heads",
    "hetify(model.eval(), layer='2', covariance='diagonal', eval_mc_samples=50, train_mc_samples=3), then two "
    "no_grad forwards (audit11 A11-22: the new head was in training mode: 3 samples of fresh noise, two different "
    "predictions)",
    r"the head takes the replaced layer's mode \(eval: equal predictions; train: training mode\)",
)
def _hetify_eval_model(tmp):
    from torch import nn

    from harness.heads import hetify

    def mlp():
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 5))

    h = hetify(mlp().eval(), layer="2", covariance="diagonal", eval_mc_samples=50, train_mc_samples=3)
    x = torch.randn(2, 4)
    with torch.no_grad():
        a, b = h(x), h(x)
    assert not h.training and not h[2].training, (h.training, h[2].training)
    assert torch.equal(a, b), (a, b)
    trained = hetify(mlp(), layer="2", covariance="diagonal")
    assert trained.training and trained[2].training
    return "the head takes the replaced layer's mode (eval: equal predictions; train: training mode)"
