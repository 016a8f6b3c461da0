"""How a refused body is told to the user: `request_problem` (one problem of a REST body,
with the fix where one is known: a misspelt field's likely name, a command given as one
string) and `describe_validation_error` (one line for the CLI, fields named as
`jobs[1].sample_cost_s`).
"""

import difflib
import json
from collections.abc import Collection, Sequence

from pydantic import ValidationError


def request_problem(
    loc: tuple[int | str, ...],
    kind: str,
    message: str,
    fields: Collection[str] = (),
    given: object = None,
) -> dict[str, str]:
    """One problem of a request body as the API reports it: the field, and a message with
    the fix where one is known (a misspelt name's likely one among the body's `fields`, a
    job's command given as one string, a variable's value `given` as a number)."""
    path = [str(part) for part in loc if part != "body"]
    message = own_words(message)
    if path:  # ours name their field already ("model: unknown model ..."): the field says it
        message = message.removeprefix(f"{path[-1]}: ")
    if kind == "extra_forbidden" and len(path) == 1:
        known = difflib.get_close_matches(path[0], fields, n=1)
        if known:
            message += f"; did you mean {known[0]!r}?"
    elif kind == "list_type" and path == ["command"] and "command" in fields:
        message += ' (a list, one argument each, no shell: ["python", "train.py", "--lr", "0.1"])'
    elif kind == "string_type" and len(path) == 2 and path[0] == "env":
        message += f" (an environment holds text: quote it, {path[1]} = {json.dumps(str(given))})"
    elif shape := _profile_shape(kind, path):
        message = f"give {shape}"
    return {"field": ".".join(path), "message": message}


def describe_validation_error(error: ValidationError) -> str:
    """One line per problem, each naming the field as `jobs[1].sample_cost_s`."""
    lines = []
    for problem in error.errors():
        path = ""
        for part in problem["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        got = problem.get("input")
        shown = "" if isinstance(got, dict | list) else f" (got {got!r})"
        named_parts = [str(part) for part in problem["loc"]]
        shape = _profile_shape(problem["type"], named_parts)
        said = f"give {shape}" if shape else own_words(problem["msg"])
        path = path or "request"
        # Ours name their field already ("model: unknown model ..."): not twice.
        if not said.startswith((f"{path}:", f"{path.split('.')[-1]}:")):
            said = f"{path}: {said}"
        lines.append(f"{said}{shown}")
    return "; ".join(lines)


def own_words(message: str) -> str:
    """A validator's own message without the kind pydantic puts before it: ours name the
    field and the fix, and "Value error, model: unknown model" reads as noise."""
    return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")


# A measured curve given as anything but a table: pydantic says "a valid dictionary or
# instance of ProfileBody", which names a class of ours, not what to write.
_PROFILE_SHAPE = (
    "a table of two lists, one rate per worker count: workers_per_gpu = [1, 2, 4] and"
    " samples_per_s = [210, 400, 690]"
)
# What pydantic calls a value that is no table, as a model (a request file, JSON) or from
# attributes (a job body).
_NOT_A_TABLE = ("model_type", "model_attributes_type", "dict_type")


def _profile_shape(kind: str, path: Sequence[str]) -> str | None:
    """What a `profile` that is not a table should be, for its problem's message."""
    return _PROFILE_SHAPE if kind in _NOT_A_TABLE and path[-1:] == ["profile"] else None
