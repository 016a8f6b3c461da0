"""The held-out validation rule: 5-fold under 200 samples, one 60/40 split from there."""

import numpy as np
import pytest

from tpm.validation import KFOLD_LIMIT, held_out_predictions, plan_validation, r_squared


@pytest.mark.parametrize("count", [8, 37, KFOLD_LIMIT - 1])
def test_few_samples_get_five_folds_holding_out_each_sample_once(count: int) -> None:
    plan = plan_validation(count, seed=3)
    assert plan.name == "5-fold"
    assert len(plan.splits) == 5
    held_out = np.concatenate([split.test for split in plan.splits])
    assert sorted(held_out.tolist()) == list(range(count))
    for split in plan.splits:
        assert set(split.train.tolist()) == set(range(count)) - set(split.test.tolist())
        assert abs(split.test.shape[0] - count / 5) < 1


@pytest.mark.parametrize("count", [KFOLD_LIMIT, 1000])
def test_many_samples_get_one_shuffled_sixty_forty_split(count: int) -> None:
    plan = plan_validation(count, seed=3)
    assert plan.name == "holdout-60/40"
    (split,) = plan.splits
    assert split.train.shape[0] == round(0.6 * count)
    assert sorted([*split.train.tolist(), *split.test.tolist()]) == list(range(count))
    # Shuffled: the training part is not simply the first 60 %.
    assert split.train.tolist() != list(range(split.train.shape[0]))


def test_the_seed_fixes_the_split_and_another_seed_changes_it() -> None:
    first = plan_validation(50, seed=1).splits[0].test.tolist()
    assert plan_validation(50, seed=1).splits[0].test.tolist() == first
    assert plan_validation(50, seed=2).splits[0].test.tolist() != first


@pytest.mark.parametrize("count", [12, 500])
def test_groups_are_spread_so_every_fit_sees_every_group(count: int) -> None:
    groups = ["rare", "rare"] + ["common"] * (count - 2)
    plan = plan_validation(count, seed=0, groups=groups)
    for split in plan.splits:
        assert {groups[i] for i in split.train} == {"rare", "common"}


def test_held_out_predictions_pool_every_split() -> None:
    plan = plan_validation(20, seed=0)
    truth = np.arange(20, dtype=np.float64)
    indices, predicted = held_out_predictions(plan, lambda train, test: truth[test] * 2.0)
    assert sorted(indices.tolist()) == list(range(20))
    assert np.array_equal(predicted, truth[indices] * 2.0)


def test_r_squared_matches_its_definition_and_is_none_without_variance() -> None:
    observed = np.array([1.0, 2.0, 3.0, 4.0])
    assert r_squared(observed, observed) == 1.0
    assert r_squared(observed, np.full(4, 2.5)) == 0.0
    assert r_squared(observed, np.array([1.0, 2.0, 3.0, 5.0])) == pytest.approx(1 - 1 / 5)
    assert r_squared(np.ones(3), np.ones(3)) is None
