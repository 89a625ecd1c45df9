"""harness.training.precision: which CPUs compute bf16 natively, read from their flags."""

import pytest

from harness.training.precision import ACCEPTED, ALIASES, CHOICES, canonical, cpu_flags, native_bf16, resolve

ZEN3 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse sse2 avx avx2 fma sha_ni vaes\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw avx512_bf16 avx512_vnni\n"
SAPPHIRE_RAPIDS = "flags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n"
ICELAKE = "flags\t\t: fpu avx2 avx512f avx512bw avx512_vnni\n"  # plain AVX512: bf16 emulated
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\nCPU implementer\t: 0x41\n"


@pytest.mark.parametrize(
    "text, native",
    [(ZEN3, False), (ZEN4, True), (SAPPHIRE_RAPIDS, True), (ICELAKE, False), (GRAVITON3, True), ("", False)],
)
def test_bf16_is_native_only_with_the_instructions_that_compute_it(text, native):
    assert native_bf16("cpu", cpuinfo=text) is native


def test_flags_are_read_from_the_first_flags_line_and_an_unreadable_cpu_has_none():
    assert cpu_flags(ZEN4) == {"fpu", "avx2", "avx512f", "avx512bw", "avx512_bf16", "avx512_vnni"}
    assert cpu_flags("model name\t: AMD EPYC\n") == set()


def test_auto_trains_in_bf16_only_where_it_is_native():
    assert resolve("auto", "cpu") == ("bf16" if native_bf16("cpu") else "no")
    assert resolve("no", "cpu") == "no" and resolve("bf16", "cpu") == "bf16"
    with pytest.raises(ValueError, match="unknown mixed precision 'fp8'"):
        resolve("fp8", "cpu")


@pytest.mark.parametrize(
    "alias, setting", [("bf16-mixed", "bf16"), ("16-mixed", "fp16"), ("16", "fp16"), ("32-true", "no"), ("32", "no")]
)
def test_lightning_spellings_are_aliases_of_the_settings(alias, setting):
    """Lightning's Trainer(precision=...) names (issue 44): one alias table, read by canonical() and resolve()."""
    assert ALIASES[alias] == setting and canonical(alias) == setting
    if setting != "fp16":  # fp16 is refused on a CPU, alias or not
        assert resolve(alias, "cpu") == setting
    assert resolve(alias, "cuda") == setting


def test_canonical_keeps_the_settings_reads_yaml_numbers_and_names_the_fix():
    assert [canonical(c) for c in CHOICES] == list(CHOICES)
    assert set(ACCEPTED) == set(CHOICES) | set(ALIASES)
    assert canonical(32) == "no" and canonical(16) == "fp16"  # YAML reads `32` as a number
    with pytest.raises(ValueError, match=r"unknown mixed precision 'fp8' \(train.mixed_precision\): .*bf16-mixed"):
        canonical("fp8", "train.mixed_precision")
    with pytest.raises(ValueError, match="whole-model cast.*bf16-mixed"):
        canonical("bf16-true")
    assert canonical(False) == canonical("False") == "no"  # YAML 1.1 reads no / off as false
    with pytest.raises(ValueError, match="mixed precision True is YAML's reading of yes / on / true.*give one of fp16"):
        canonical(True)
    with pytest.raises(ValueError, match="unknown mixed precision"):
        canonical(["bf16"])
    with pytest.raises(ValueError, match="fp16 does not run on a CPU"):
        resolve("16-mixed", "cpu")
