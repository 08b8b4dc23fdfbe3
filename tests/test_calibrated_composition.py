"""A calibrated judge is composed by ``brrm.load`` (``compose/calibrated.py``), never edited after it is built: its
every P(A ≻ B) is the calibration of the raw one, voting still composes over it, and its spec rebuilds it with the
calibration (a Ray actor, a verl worker and an audit resume get the same calibrated judge)."""

from __future__ import annotations

import math

import pytest

import brrm
from brrm.compose.calibrated import CalibratedPairJudge, calibrated_ordered, calibrated_scalar
from brrm.errors import ConfigError
from brrm.types.calibration import Calibration, write_calibration

TINY = {"kind": "brrm", "temperature": 0.0, "thinking": "off", "max_new_tokens": 450, "block_token_cap": 8}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from brrm.testing import save_tiny_qwen3

    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny")))


def test_load_composes_the_calibration_and_the_spec_keeps_it(tiny, tmp_path):
    calibration = Calibration("pairwise", 2.0)
    path = tmp_path / "calib.json"
    write_calibration(path, calibration)
    with brrm.load(tiny, calibration=str(path), **TINY) as judge:
        assert isinstance(judge.model, CalibratedPairJudge)
        assert judge.info.composition.calibration == calibration.hash
        j = judge.judge("What is 2+2?", "4", "5")
        assert j.status == "ok" and j.p_a_raw is not None and not math.isnan(j.p_a_raw)
        assert j.p_a == pytest.approx(calibration.probability(j.p_a_raw), abs=1e-12)
        assert j.provenance.calibration == calibration.hash
        spec = judge.info.spec
    assert spec.options["calibration"] == str(path)
    with brrm.JudgeSpec.from_json(spec.to_json()).load() as same:
        again = same.judge("What is 2+2?", "4", "5")
        assert same.info.composition.calibration == calibration.hash and again.p_a == j.p_a


def test_voting_composes_over_a_calibrated_model(tiny, tmp_path):
    """``samples`` is a declared trait of the model (``votes``), which the calibrated wrapper carries on."""
    path = tmp_path / "calib.json"
    write_calibration(path, Calibration("pairwise", 0.5))
    opts = {**TINY, "temperature": 1.0, "samples": 2}
    with brrm.load(tiny, calibration=str(path), **opts) as judge:
        assert judge.info.composition.samples == 2 and judge.model.votes
        j = judge.judge("What is 2+2?", "4", "5")
        assert len(j.sub_judgments) == 2 and j.provenance.calibration


def test_a_calibration_of_the_other_kind_is_refused_by_name(tiny):
    with brrm.load(tiny, **TINY) as judge:
        with pytest.raises(ConfigError, match="a scalar calibration does not apply to a pairwise judge"):
            calibrated_ordered(judge.model, Calibration("scalar", 1.5))
        with pytest.raises(ConfigError, match="a pairwise calibration does not apply to a scalar judge"):
            calibrated_scalar(judge, Calibration("pairwise", 1.5))
        assert calibrated_ordered(judge.model, None) is judge.model
