//! Collectors: node, pod and container usage read from /proc and cgroups.
