"""``brrm serve`` flags: every limit and flag is checked before any model loads (one ``brrm: error:`` line, exit 2)."""

from __future__ import annotations

import pytest

from brrm.cli import main


@pytest.mark.parametrize(("flags", "message"), [
    (["--port", "70000"], "--port 70000 is outside 0-65535"),
    (["--failed-reward", "low"], "--failed-reward 'low' is not a number or null"),
    (["--concurrency", "many"], "--concurrency 'many' is not valid"),
    (["--max-batch", "0"], "--max-batch must be an integer >= 1"),
    (["--deadline", "0"], "--deadline must be a finite number > 0"),
    (["--api-key", "short"], "--api-key must be a string of at least 8 characters"),
    (["--model", "some/model", "--factory", "tests.serve_helpers:fake_brrm"], "give --model or --factory"),
    (["--factory", "tests.serve_helpers"], "is not MODULE:FUNCTION"),
    (["--factory", "tests.serve_helpers:nothing_here"], "has no attribute 'nothing_here'"),
    (["--kind", "bt", "--get-reward-mode", "reference", "--factory", "tests.serve_helpers:fake_bt", "--port", "0"],
     "--get-reward-mode 'reference' needs a pairwise judge"),
])
def test_bad_flags_are_one_error_line(flags, message, capsys, busy_8000):
    assert main(["serve", *flags]) == 2
    err = capsys.readouterr().err
    # one error line; the kind checks need the loaded judge, so they come after "listening … loading the model"
    assert err.strip().splitlines()[-1].startswith("brrm: error:") and message in err and "Traceback" not in err
    assert err.startswith("brrm: error:") or "loading the model" in err.splitlines()[0]
