"""Typed reading of a decoded JSON model, with the field's path in every error."""

from __future__ import annotations

from dataclasses import dataclass

from tpm.errors import ModelFormatError


@dataclass(frozen=True)
class Fields:
    """One JSON object of a saved model, read field by field.

    Every accessor raises ModelFormatError naming `source` and the field's dotted path
    when the field is missing or has the wrong type.
    """

    data: dict[str, object]
    path: str
    source: str

    @classmethod
    def root(cls, data: object, source: str) -> Fields:
        """The top-level object of a model read from `source`."""
        if not isinstance(data, dict):
            raise ModelFormatError(source, "the model must be a JSON object")
        return cls(data=data, path="", source=source)

    def _name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def invalid(self, key: str, expected: str) -> ModelFormatError:
        """The error for a field at `key` that is not `expected`."""
        return ModelFormatError(
            self.source, f"field {self._name(key)} must be {expected}; refit the model"
        )

    def _get(self, key: str) -> object:
        if key not in self.data:
            raise ModelFormatError(
                self.source, f"field {self._name(key)} is missing; refit the model"
            )
        return self.data[key]

    def child(self, key: str) -> Fields:
        """The object at `key`."""
        value = self._get(key)
        if not isinstance(value, dict):
            raise self.invalid(key, "an object")
        return Fields(data=value, path=self._name(key), source=self.source)

    def text(self, key: str) -> str:
        """The string at `key`."""
        value = self._get(key)
        if not isinstance(value, str):
            raise self.invalid(key, "a string")
        return value

    def integer(self, key: str) -> int:
        """The integer at `key`."""
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.invalid(key, "an integer")
        return value

    def number(self, key: str) -> float:
        """The number at `key`, as a float."""
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.invalid(key, "a number")
        return float(value)

    def optional_number(self, key: str) -> float | None:
        """The number at `key`, or None where the field is null."""
        if self._get(key) is None:
            return None
        return self.number(key)

    def numbers(self, key: str) -> list[float]:
        """The list of numbers at `key`."""
        value = self._get(key)
        if not isinstance(value, list) or not all(
            isinstance(item, int | float) and not isinstance(item, bool) for item in value
        ):
            raise self.invalid(key, "a list of numbers")
        return [float(item) for item in value]

    def vector(self, key: str, length: int) -> list[float]:
        """The list of exactly `length` numbers at `key`."""
        values = self.numbers(key)
        if len(values) != length:
            raise self.invalid(key, f"a list of {length} numbers")
        return values

    def integers(self, key: str) -> list[int]:
        """The list of integers at `key`."""
        value = self._get(key)
        if not isinstance(value, list) or not all(
            isinstance(item, int) and not isinstance(item, bool) for item in value
        ):
            raise self.invalid(key, "a list of integers")
        return list(value)

    def matrix(self, key: str, width: int) -> list[list[float]]:
        """The list of `width`-long lists of numbers at `key`."""
        value = self._get(key)
        expected = f"a list of lists of {width} numbers"
        if not isinstance(value, list):
            raise self.invalid(key, expected)
        rows: list[list[float]] = []
        for row in value:
            if not (
                isinstance(row, list)
                and len(row) == width
                and all(isinstance(x, int | float) and not isinstance(x, bool) for x in row)
            ):
                raise self.invalid(key, expected)
            rows.append([float(x) for x in row])
        return rows

    def objects(self, key: str) -> list[Fields]:
        """The list of objects at `key`."""
        value = self._get(key)
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise self.invalid(key, "a list of objects")
        return [
            Fields(data=item, path=f"{self._name(key)}[{index}]", source=self.source)
            for index, item in enumerate(value)
        ]

    def number_map(self, key: str) -> dict[str, float]:
        """The object at `key` whose values are all numbers."""
        child = self.child(key)
        return {name: child.number(name) for name in child.data}
