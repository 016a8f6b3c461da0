"""Held-out validation shared by the training and loading models.

The rule: with fewer than `KFOLD_LIMIT` samples, 5-fold cross-validation (shuffled with a
seed) so that every sample is held out once and R^2 is computed on the pooled held-out
predictions; with more, one shuffled 60/40 split as in the paper (Sec. III-B), which is
cheaper and already has plenty of held-out samples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tpm.arrays import FloatArray, IndexArray

KFOLD_LIMIT = 200
FOLDS = 5
HOLDOUT_TRAIN_FRACTION = 0.6


@dataclass(frozen=True, eq=False)
class Split:
    """Indices to fit on and indices to predict, disjoint."""

    train: IndexArray
    test: IndexArray


@dataclass(frozen=True, eq=False)
class ValidationPlan:
    """How a model is validated: a report name and the splits."""

    name: str
    splits: tuple[Split, ...]

    def smallest_train(self) -> int:
        """The fewest samples any split fits on."""
        return min(int(split.train.shape[0]) for split in self.splits)


def plan_validation(
    sample_count: int, seed: int, groups: Sequence[str] | None = None
) -> ValidationPlan:
    """Splits for `sample_count` samples following the rule in the module docstring.

    With `groups`, each group's samples are spread over the folds (or split 60/40 within
    the group, keeping at least one to fit on), so every split fits on every group that
    has at least two samples.
    """
    rng = np.random.default_rng(seed)
    labels = list(groups) if groups is not None else [""] * sample_count
    members: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        members.setdefault(label, []).append(index)
    shuffled = [
        np.asarray(rng.permutation(np.asarray(indices)), dtype=np.intp)
        for _, indices in sorted(members.items())
    ]
    if sample_count < KFOLD_LIMIT:
        order = np.concatenate(shuffled)
        fold_of = np.empty(sample_count, dtype=np.intp)
        # Consecutive positions go to consecutive folds, so each group is spread evenly.
        fold_of[order] = np.arange(sample_count) % FOLDS
        splits = tuple(
            Split(
                train=np.flatnonzero(fold_of != fold).astype(np.intp),
                test=np.flatnonzero(fold_of == fold).astype(np.intp),
            )
            for fold in range(min(FOLDS, sample_count))
        )
        return ValidationPlan(name=f"{FOLDS}-fold", splits=splits)
    train_parts: list[IndexArray] = []
    test_parts: list[IndexArray] = []
    for indices in shuffled:
        cut = max(1, round(HOLDOUT_TRAIN_FRACTION * indices.shape[0]))
        train_parts.append(indices[:cut])
        test_parts.append(indices[cut:])
    split = Split(
        train=np.sort(np.concatenate(train_parts)), test=np.sort(np.concatenate(test_parts))
    )
    return ValidationPlan(name="holdout-60/40", splits=(split,))


def held_out_predictions(
    plan: ValidationPlan, fit_predict: Callable[[IndexArray, IndexArray], FloatArray]
) -> tuple[IndexArray, FloatArray]:
    """Pooled held-out predictions: the test indices of every split and what was predicted.

    `fit_predict(train, test)` fits on `train` and returns predictions for `test`.
    """
    indices = [split.test for split in plan.splits]
    predictions = [fit_predict(split.train, split.test) for split in plan.splits]
    return np.concatenate(indices), np.concatenate(predictions)


def r_squared(observed: FloatArray, predicted: FloatArray) -> float | None:
    """Coefficient of determination, or None when `observed` has no variance."""
    residual = float(np.sum((observed - predicted) ** 2))
    total = float(np.sum((observed - np.mean(observed)) ** 2))
    if total <= 0.0:
        return None
    return 1.0 - residual / total
