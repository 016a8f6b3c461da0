"""Errors raised by the throughput prediction model.

Every error is a `TpmError`, itself a `ValueError`, so callers can catch the package's
failures in one place. Each carries the data a caller needs to tell the user what to fix.
"""

from __future__ import annotations

from collections.abc import Iterable


class TpmError(ValueError):
    """Base class of every error raised by `tpm`."""


class SampleError(TpmError):
    """A sample file or sample set the model cannot use.

    `source` names the file (or other origin) of the samples, `row` is the 1-based data
    row (the header is not counted) or None when the problem is not one row's, and
    `column` the offending column or None.
    """

    def __init__(
        self, source: str, message: str, *, row: int | None = None, column: str | None = None
    ) -> None:
        self.source = source
        self.row = row
        self.column = column
        self.detail = message
        where = [source]
        location = ", ".join(
            part
            for part in (
                f"row {row}" if row is not None else "",
                f"column {column}" if column is not None else "",
            )
            if part
        )
        if location:
            where.append(location)
        super().__init__(": ".join([*where, message]))


class UnknownPipeline(TpmError):
    """A loading pipeline the fitted model has no sample cost for."""

    def __init__(self, pipeline: str, known: Iterable[str]) -> None:
        self.pipeline = pipeline
        self.known = tuple(sorted(known))
        names = ", ".join(repr(name) for name in self.known) or "none"
        super().__init__(
            f"unknown pipeline {pipeline!r}; the model knows {names}. "
            "Add loading samples for it and refit."
        )


class UnknownModel(TpmError):
    """A model name the zoo cannot count; `where` is the field, `message` the fix."""

    def __init__(self, message: str, where: str = "model") -> None:
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}")


class ModelFormatError(TpmError):
    """A saved model that cannot be read: not JSON, another format or version, bad fields."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        self.detail = message
        super().__init__(f"{source}: {message}")


class QueryError(TpmError):
    """A prediction asked for with arguments outside the model's domain."""
