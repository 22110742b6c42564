//! Node capability detection: what this kernel can actually enforce.
