//! QoS manager: strategies that keep running pods within their NodeSLO.
//!
//! [`framework`] holds the plugin contract ([`Strategy`], [`QosSnapshot`],
//! [`Decision`], [`Evictor`]) and the [`QosRunner`] that applies decisions.

pub mod blkio;
pub mod cgreconcile;
pub mod cpuburst;
pub mod cpuevict;
pub mod cpusuppress;
pub mod framework;
pub mod memoryevict;
pub mod resctrl;
pub mod service;
pub mod sysreconcile;

pub use framework::{
    Capability, CgroupReader, Decision, EvictionRequest, Evictor, FileWrite, GaugeValue,
    LayoutReader, LoggingEvictor, ManagedFile, ManagedFiles, MapReader, MetricSample, NodeInfo,
    NodeUsage, Note, NoteKind, QosContainer, QosManagerConfig, QosMetrics, QosPod, QosRunner,
    QosSnapshot, ReadBack, RoundOutcome, Strategy, test_capabilities,
};
