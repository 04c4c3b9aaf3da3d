"""Canary rollouts: the traffic split, the decision in force, and its topic.

Below ingest, the worker and the scaler alike: they all fold `inferbus.rollouts` into a
`RolloutBook` and read the same `effective` rollout of a model from it.
"""

from infra.rollout.split import lane_for
from infra.rollout.state import Effective, RolloutBook, effective, lane_version

__all__ = ["Effective", "RolloutBook", "effective", "lane_for", "lane_version"]
