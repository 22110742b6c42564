//! NRI plugin transport for the runtime hooks.
