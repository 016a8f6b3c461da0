"""Workload generator, trace replay and the node simulator."""
