"""Every policy by name. Each takes one AllocationRequest and returns one AllocationPlan."""

from collections.abc import Callable, Mapping
from types import MappingProxyType

from allocator.baselines import balance, inverse, proportion
from allocator.errors import UnknownPolicy
from allocator.joint import joint
from allocator.lookahead import lookahead
from allocator.optimal import fair, optimal
from allocator.types import AllocationPlan, AllocationRequest
from allocator.waa import static, waa

Policy = Callable[[AllocationRequest], AllocationPlan]

POLICIES: Mapping[str, Policy] = MappingProxyType(
    {
        "balance": balance,
        "proportion": proportion,
        "inverse": inverse,
        "waa": waa,
        "static": static,
        "optimal": optimal,
        "fair": fair,
        "joint": joint,
        "lookahead": lookahead,
    }
)


def get_policy(name: str) -> Policy:
    """The policy called `name`; UnknownPolicy lists the choices otherwise."""
    try:
        return POLICIES[name]
    except KeyError:
        raise UnknownPolicy(name, tuple(POLICIES)) from None


def allocate(request: AllocationRequest, policy: str) -> AllocationPlan:
    """Plan `request` with the named policy."""
    return get_policy(policy)(request)
