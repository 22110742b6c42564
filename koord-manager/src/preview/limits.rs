//! The limits a snapshot is read under, shared by the preview and its fast
//! YAML reader.

/// The deepest nesting of mappings and sequences (YAML) or objects and
/// arrays (JSON) a snapshot may have. Kubernetes objects nest about a dozen
/// levels deep.
pub const MAX_NESTING: usize = 128;

/// The default of `--max-snapshot-bytes`.
pub const DEFAULT_MAX_SNAPSHOT_BYTES: u64 = 512 << 20;
