import pytest

from allocator import allocate
from tests.unit.allocator.builders import make_job, make_request, paper_static_request


def processes(policy: str) -> list[int]:
    plan = allocate(paper_static_request(), policy)
    return [2 * d for d in plan.workers().values()]


def test_paper_static_case_splits_as_fig3_where_the_paper_says_how() -> None:
    assert processes("balance") == [6, 6, 6]
    assert processes("proportion") == [12, 4, 2]
    # The paper's hand-made inverse split was (2, 4, 12); largest remainder gives (2, 6, 10).
    assert processes("inverse") == [2, 6, 10]


def test_balance_hands_leftovers_one_per_gpu_in_request_order() -> None:
    request = make_request(
        make_job("a", gpus=2), make_job("b", gpus=1), make_job("c", gpus=1), cpu_workers=11
    )
    # 11 // 4 = 2 each (8 processes); a takes 2 more (10), b 1 more (11), c none.
    assert allocate(request, "balance").workers() == {"a": 3, "b": 3, "c": 2}


@pytest.mark.parametrize("policy", ["balance", "proportion", "inverse"])
def test_no_spare_capacity_gives_the_floor_and_says_why(policy: str) -> None:
    request = make_request(make_job("a", gpus=4), make_job("b", gpus=4), cpu_workers=6)
    plan = allocate(request, policy)
    assert plan.workers() == {"a": 1, "b": 1}
    assert plan.over_capacity
    assert any("oversubscribed" in note for note in plan.notes)


def test_proportion_and_inverse_favour_big_and_small_models() -> None:
    big = make_job("big", model_params=100e6)
    small = make_job("small", model_params=1e6)
    request = make_request(big, small, cpu_workers=12)
    assert allocate(request, "proportion").workers() == {"big": 11, "small": 1}
    assert allocate(request, "inverse").workers() == {"big": 1, "small": 11}
