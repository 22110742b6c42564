//! In-memory metric cache: bounded ring buffers with windowed aggregation.
