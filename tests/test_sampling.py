"""An eval that samples: on a real model every trial runs at a temperature above 0 on its own seed (S + t), both on
record; the run commands take the same `--temperature`; the scripted model keeps its seeded dice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import compare
from comparison.eval import trials as evaluation
from shared_tools.models import ModelSpecError, make_model
from tests.openai_hostile import MODEL, Answer, HostileServer

SPEC = f"openai:{MODEL}"


def asked(server: HostileServer) -> list[tuple[float, int]]:
    """(temperature, seed) of every model request the server was sent."""
    return [(body["temperature"], body["seed"]) for body in server.requests]


def test_every_trial_of_a_real_model_eval_samples_on_its_own_seed(tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    with HostileServer(rule=lambda body: Answer.text("Sorry, I could not finish.")) as server:
        code = evaluation.eval_main(
            [
                "bookstore",
                *("--model", SPEC, "--base-url", server.base_url),
                *("--runs", "3", "--seed", "40", "--contenders", "handwritten", "--json", str(out)),
            ]
        )
    assert code == 0
    document = json.loads(out.read_text())
    assert (document["temperature"], document["trial_seeds"]) == (evaluation.EVAL_TEMPERATURE, [40, 41, 42])
    assert evaluation.EVAL_TEMPERATURE > 0
    sent = asked(server)
    assert {temperature for temperature, _ in sent} == {evaluation.EVAL_TEMPERATURE}
    assert sorted({seed for _, seed in sent}) == [40, 41, 42], "each trial's requests carry that trial's seed"


def test_the_temperature_is_the_users_and_a_bad_one_is_a_usage_error(tmp_path: Path) -> None:
    with HostileServer(rule=lambda body: Answer.text("Done.")) as server:
        argv = ["bookstore", "--model", SPEC, "--base-url", server.base_url, "--runs", "1", "--seed", "3"]
        assert evaluation.eval_main([*argv, "--contenders", "handwritten", "--temperature", "0.2"]) == 0
    assert {temperature for temperature, _ in asked(server)} == {0.2}
    for bad in ("-0.1", "2.5", "nan", "warm"):
        assert evaluation.eval_main(["bookstore", "--temperature", bad]) == 2


def test_the_scripted_model_takes_no_temperature_and_says_so() -> None:
    args = evaluation.build_eval_parser().parse_args(["bookstore", "--temperature", "1.5", "--seed", "1"])
    plan = evaluation.plan_from(args)
    assert plan.temperature == 1.5 and plan.sampling is None, "the persona's slips are seeded dice"
    args = evaluation.build_eval_parser().parse_args(["bookstore", "--model", "local"])
    assert evaluation.plan_from(args).sampling == evaluation.EVAL_TEMPERATURE


def test_a_run_command_sends_its_temperature_and_defaults_to_zero() -> None:
    with HostileServer(rule=lambda body: Answer.text("Done.")) as server:
        argv = ["bookstore", "--model", SPEC, "--base-url", server.base_url, "--contenders", "handwritten"]
        assert compare.main([*argv, "--no-trace"]) == 0
        first = len(server.requests)
        assert compare.main([*argv, "--no-trace", "--temperature", "0.9"]) == 0
    temperatures = [temperature for temperature, _ in asked(server)]
    assert set(temperatures[:first]) == {0} and set(temperatures[first:]) == {0.9}


@pytest.mark.parametrize("bad", [-1.0, 2.01, float("nan")])
def test_make_model_refuses_a_temperature_out_of_range(bad: float) -> None:
    with pytest.raises(ModelSpecError, match="temperature"):
        make_model("scripted", temperature=bad)
