"""Workload generator, trace replay and the node simulator."""

ORACLE = "oracle"  # the policy name under which a simulation plans with the truth's rates
# "oracle:<policy>": that policy planned on the truth's rates (plain `oracle` is `optimal`'s).
ORACLE_OF = ORACLE + ":"
