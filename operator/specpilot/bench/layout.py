"""How many pods serve a benchmark scenario, how arrivals reach them and how a rollout replaces them (pure).

The benchmark's mirror of spec.replicas and spec.rollout (api/rollout.py completes its defaults), plus the balancer
in front of the pods, which the spec does not say (bench/fleet.py serves it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Balancer(enum.Enum):
    ROUND_ROBIN = "round-robin"  # a Kubernetes Service (kube-proxy IPVS rr; iptables' random pick has the same mean)
    LEAST_OUTSTANDING = "least-outstanding"  # an inference gateway's endpoint picker


@dataclass(frozen=True)
class Layout:
    """How many pods serve a scenario and how a rollout replaces them (spec.replicas and spec.rollout)."""

    replicas: int = 1
    balancer: Balancer = Balancer.ROUND_ROBIN
    max_surge: int = 0
    max_unavailable: int = 1
    drain_s: float = 300.0

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be at least 1, got {self.replicas}")
        if self.max_surge == 0 and self.max_unavailable == 0:
            raise ValueError("maxSurge and maxUnavailable cannot both be 0: a rollout could never replace a pod")

    @property
    def outage(self) -> bool:
        """One replica without surge: every restart is an outage (bench.runner.Replica, not a Fleet)."""
        return self.replicas == 1 and self.max_surge == 0
