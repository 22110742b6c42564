//! The agent's view of its node: pods, Node, NodeSLO, NodeMetric, Device.
