//! Label/annotation keys, QoS and priority classes, resource names.
