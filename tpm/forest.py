"""Random-forest step-time regressor (the last row of Table I), stored as plain arrays.

scikit-learn grows the trees; we keep each tree's node arrays (children, split feature,
threshold, leaf value) and predict by walking them in numpy, so the forest saves to JSON
without pickle and predicts identically after loading.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpm.arrays import FloatArray, IntArray, frozen_floats, frozen_ints
from tpm.fields import Fields

# Few, shallow-leaved trees: enough to rank against the other candidates while keeping
# a 1,000-sample fit well under a second and the saved model small.
TREES = 30
MIN_SAMPLES_LEAF = 2


@dataclass(frozen=True, eq=False)
class TreeArrays:
    """One regression tree: node i splits on `feature[i] <= threshold[i]`.

    A leaf has `left[i] == right[i] == -1`; `value[i]` is the mean log step time of the
    training samples that reached node i.
    """

    left: IntArray = field(repr=False)
    right: IntArray = field(repr=False)
    feature: IntArray = field(repr=False)
    threshold: FloatArray = field(repr=False)
    value: FloatArray = field(repr=False)

    def leaf_values(self, features: FloatArray) -> FloatArray:
        """The value of the leaf each row of `features` falls into."""
        rows = np.arange(features.shape[0])
        node = np.zeros(features.shape[0], dtype=np.int64)
        while True:
            children = self.left[node]
            inner = children >= 0
            if not inner.any():
                break
            # Leaves have feature -2; clamp so the gather stays in range, result unused.
            split_feature = np.maximum(self.feature[node], 0)
            go_left = features[rows, split_feature] <= self.threshold[node]
            step = np.where(go_left, children, self.right[node])
            node = np.where(inner, step, node)
        values: FloatArray = self.value[node]
        return values

    def to_dict(self) -> dict[str, object]:
        """The node arrays as lists."""
        return {
            "left": self.left.tolist(),
            "right": self.right.tolist(),
            "feature": self.feature.tolist(),
            "threshold": self.threshold.tolist(),
            "value": self.value.tolist(),
        }

    @classmethod
    def from_fields(cls, fields: Fields, width: int) -> TreeArrays:
        """Rebuild from `to_dict` output, checking the arrays describe a tree."""
        left = fields.integers("left")
        right = fields.integers("right")
        feature = fields.integers("feature")
        threshold = fields.numbers("threshold")
        value = fields.numbers("value")
        count = len(left)
        if count == 0 or any(len(a) != count for a in (right, feature, threshold, value)):
            raise fields.invalid("left", "node arrays of one common, non-zero length")
        for index in range(count):
            children = (left[index], right[index])
            is_leaf = children == (-1, -1)
            # Children come after their parent, so a walk always ends at a leaf.
            if not is_leaf and not all(index < c < count for c in children):
                raise fields.invalid("left", "child indices after their parent")
            if not is_leaf and not 0 <= feature[index] < width:
                raise fields.invalid("feature", f"feature indices below {width}")
        return cls(
            left=frozen_ints(left),
            right=frozen_ints(right),
            feature=frozen_ints(feature),
            threshold=frozen_floats(threshold),
            value=frozen_floats(value),
        )


@dataclass(frozen=True, eq=False)
class ForestStepTime:
    """A random forest over log features predicting log step time."""

    trees: tuple[TreeArrays, ...]

    def predict(self, raw: FloatArray) -> FloatArray:
        """exp of the trees' mean prediction at each row of `raw`."""
        # scikit-learn compares float32 copies of the features with the thresholds;
        # rounding the same way sends every sample down the same branches.
        features = np.log(raw).astype(np.float32).astype(np.float64)
        total = np.zeros(raw.shape[0], dtype=np.float64)
        for tree in self.trees:
            total += tree.leaf_values(features)
        result: FloatArray = np.exp(total / len(self.trees))
        return result

    def to_dict(self) -> dict[str, object]:
        """Every tree's node arrays."""
        return {"trees": [tree.to_dict() for tree in self.trees]}

    @classmethod
    def from_fields(cls, fields: Fields) -> ForestStepTime:
        """Rebuild from `to_dict` output."""
        trees = tuple(TreeArrays.from_fields(tree, 4) for tree in fields.objects("trees"))
        if not trees:
            raise fields.invalid("trees", "a non-empty list of trees")
        return cls(trees=trees)


def fit_forest(raw: FloatArray, step_time: FloatArray, seed: int) -> ForestStepTime:
    """Grow `TREES` trees on (log features, log step time) with `seed` as random state."""
    # Imported on use, as in `tpm.candidates`: only fitting needs scikit-learn.
    from sklearn.ensemble import RandomForestRegressor  # noqa: PLC0415

    forest = RandomForestRegressor(
        n_estimators=TREES, min_samples_leaf=MIN_SAMPLES_LEAF, random_state=seed, n_jobs=1
    )
    forest.fit(np.log(raw), np.log(step_time))
    return forest_from_estimator(forest)


def forest_from_estimator(forest: Any) -> ForestStepTime:
    """Copy the node arrays out of a fitted single-output scikit-learn forest."""
    trees = []
    for estimator in forest.estimators_:
        nodes = estimator.tree_
        trees.append(
            TreeArrays(
                left=frozen_ints(nodes.children_left),
                right=frozen_ints(nodes.children_right),
                feature=frozen_ints(nodes.feature),
                threshold=frozen_floats(nodes.threshold),
                value=frozen_floats(nodes.value[:, 0, 0]),
            )
        )
    return ForestStepTime(trees=tuple(trees))
