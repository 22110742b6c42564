//! QoS strategy `memoryevict`.
