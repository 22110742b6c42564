//! Validated, cached, ordered writes of cgroup and resctrl files, with an audit trail.
