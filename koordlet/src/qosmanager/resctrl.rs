//! QoS strategy `resctrl`.
