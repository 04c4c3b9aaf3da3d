"""Actuators: set worker-group replicas on local processes, Kubernetes or docker compose."""

from scaler.actuators.base import Actuator, ActuatorError, parse_group
from scaler.actuators.compose import ComposeActuator
from scaler.actuators.decisions import decision_record, publish_decision
from scaler.actuators.factory import ACTUATOR_KINDS, ActuatorKind, choose_kind, make_actuator
from scaler.actuators.kubernetes import KubernetesActuator
from scaler.actuators.local import LocalActuator

__all__ = [
    "ACTUATOR_KINDS",
    "Actuator",
    "ActuatorError",
    "ActuatorKind",
    "ComposeActuator",
    "KubernetesActuator",
    "LocalActuator",
    "choose_kind",
    "decision_record",
    "make_actuator",
    "parse_group",
    "publish_decision",
]
