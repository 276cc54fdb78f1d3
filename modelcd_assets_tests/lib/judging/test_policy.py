import pytest

from modelcd_assets.lib.errors import ModelcdError
from modelcd_assets.lib.judging.policy import Policy, load_policy


def test_defaults_match_the_documented_gates():
    p = load_policy(None)
    assert p.accuracy.tolerance_points == 0.3
    assert p.int8_fidelity.min_top1_agreement == 0.99
    assert p.throughput.min_ratio == 0.88


def test_a_policy_file_overrides_and_declares_golden_cases(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("accuracy:\n  absolute_floor: 0.8\ngolden:\n  - text: hi\n    label: billing\n")
    p = load_policy(f)
    assert p.accuracy.absolute_floor == 0.8 and p.accuracy.alpha == Policy().accuracy.alpha
    assert p.golden[0].label == "billing"


@pytest.mark.parametrize(
    "text, message",
    [
        ("accuracy:\n  tolerance: 1\n", "accuracy.tolerance: Extra inputs are not permitted"),
        ("accuracy:\n  absolute_floor: 1.5\n", "accuracy.absolute_floor"),
        ("throughput:\n  pairs: 20\n  max_pairs: 10\n", "max_pairs (10) must be at least pairs (20)"),
        ("throughput:\n  on_inconclusive: maybe\n", "throughput.on_inconclusive"),
        (
            "throughput:\n  pairs: 4\n",
            "pairs (4) is too few for a 95% CI on the median ratio: even (min, max) of 4 pairs covers the median only 87.5%",
        ),
        ("throughput:\n  pairs: 5\n", "covers the median only 93.75% of the time; use at least 6 pairs"),
        ("throughput:\n  pairs: 6\n  confidence: 0.99\n", "pairs (6) is too few for a 99% CI"),
        ("safety:\n  allow: '*.dat'\n", "safety.allow: Input should be a valid list"),
        ("safety:\n  allow: ['']\n", "safety.allow.0"),
        ("safety:\n  allow: [3]\n", "safety.allow.0"),
        ("safety:\n  allowed: ['*.dat']\n", "safety.allowed: Extra inputs are not permitted"),
        ("serving:\n  max_texts: 0\n", "serving.max_texts"),
        ("serving:\n  max_body_bytes: 10\n", "serving.max_body_bytes"),
        (
            "serving:\n  sample_max_bytes: 1048576\n  max_text_chars: 100000\n",
            "sample_max_bytes (1048576) is too small for a text of max_text_chars (100000); use at least 1200514",
        ),
        ("- a\n- b\n", "must hold a mapping"),
        ("accuracy: [\n", "not valid YAML"),
    ],
)
def test_invalid_policies_name_the_problem(tmp_path, text, message):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ModelcdError) as e:
        load_policy(f)
    assert message in str(e.value) and str(f) in str(e.value)


def test_safety_allow_patterns_reach_the_scan_limits(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("safety:\n  allow: ['*.csv', 'extra/*']\n")
    assert load_policy(f).safety.limits().allow == ("*.csv", "extra/*")
    assert load_policy(None).safety.limits().allow == ()


def test_default_pairs_suffice_for_the_default_confidence():
    from modelcd_assets.lib.judging.stats import median_ci_min_n

    p = load_policy(None).throughput
    assert median_ci_min_n(p.confidence) <= p.pairs <= p.max_pairs


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ModelcdError, match="does not exist"):
        load_policy(tmp_path / "nope.yaml")


def test_every_problem_of_an_invalid_policy_is_named(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("accuracy:\n  absolute_floor: 1.5\n  tolerance: 1\n")
    with pytest.raises(ModelcdError, match=r"accuracy\.absolute_floor: .*; accuracy\.tolerance: Extra inputs are not permitted$"):
        load_policy(f)


def test_safety_limits_are_converted_from_mib():
    from modelcd_assets.lib.judging.policy import SafetyPolicy
    from modelcd_assets.lib.judging.safety import SafetyLimits

    limits = SafetyPolicy(max_file_mb=1.5, max_total_mb=3, max_files=7, allow=["*.csv"]).limits()
    assert limits == SafetyLimits(max_total_bytes=3 << 20, max_file_bytes=3 << 19, max_files=7, allow=("*.csv",))


def test_serving_limits_default_to_what_a_classifier_request_needs():
    """The server accepted 64 texts of 5 MiB each; its limits are policy now, checked before parsing or tokenizing."""
    from modelcd_assets.lib.operations.traffic_log import record_bytes_bound

    s = load_policy(None).serving
    assert (s.max_body_bytes, s.max_text_chars, s.max_texts, s.sample_max_bytes) == (2**20, 20_000, 64, 64 * 2**20)
    assert s.sample_max_bytes // 2 > record_bytes_bound(s.max_text_chars)
