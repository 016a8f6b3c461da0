"""What a refused job body says: the field, and the fix where one is known."""

import pytest
from pydantic import ValidationError

from daemon.schemas import JobSubmission, describe_validation_error, request_problem

FIELDS = tuple(JobSubmission.model_fields)


def test_a_variable_given_as_a_number_is_told_to_quote_it() -> None:
    # `env = { SEED = 3 }` in a job file: TOML's 3 is a number, an environment holds text.
    said = request_problem(
        ("body", "env", "SEED"), "string_type", "Input should be a valid string", FIELDS, 3
    )
    assert said["field"] == "env.SEED"
    assert said["message"].endswith('(an environment holds text: quote it, SEED = "3")')


def test_a_misspelt_field_and_a_command_as_one_string_are_told_the_fix() -> None:
    assert request_problem(("body", "comand"), "extra_forbidden", "Extra inputs", FIELDS)[
        "message"
    ].endswith("did you mean 'command'?")
    said = request_problem(("body", "command"), "list_type", "Input should be a valid list", FIELDS)
    assert '["python", "train.py", "--lr", "0.1"]' in said["message"]


def test_a_validators_own_message_comes_without_pydantics_kind_before_it() -> None:
    with pytest.raises(ValidationError) as refused:
        JobSubmission.model_validate({"name": "x", "model": "AlexNet", "gpus": 1})
    (error,) = refused.value.errors()
    problem = request_problem(tuple(error["loc"]), error["type"], error["msg"])
    assert problem["field"] == "model"
    assert problem["message"].startswith("unknown model 'AlexNet'"), problem  # named once
    assert describe_validation_error(refused.value).startswith("model: unknown model")


def test_a_profile_that_is_not_a_table_is_told_its_shape_in_a_job_body() -> None:
    with pytest.raises(ValidationError) as refused:
        JobSubmission.model_validate({"name": "x", "command": ["true"], "profile": [1, 2, 4]})
    (said,) = [
        request_problem(tuple(error["loc"]), error["type"], error["msg"])
        for error in refused.value.errors()
        if error["loc"][-1:] == ("profile",)
    ]
    assert said == {
        "field": "profile",
        "message": "give a table of two lists, one rate per worker count: workers_per_gpu ="
        " [1, 2, 4] and samples_per_s = [210, 400, 690]",
    }
