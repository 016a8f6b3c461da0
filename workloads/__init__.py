"""Workload generator, trace replay and the node simulator."""

ORACLE = "oracle"  # the policy name under which a simulation plans with the truth's rates
