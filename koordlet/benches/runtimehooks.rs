//! RuntimeHookService round-trip benchmark (filled in by the next change).
fn main() {}
