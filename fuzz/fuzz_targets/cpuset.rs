//! CPU list parsers (`0-3,8`), the text of annotations anyone who may create
//! a pod, a Reservation or annotate a node can write:
//!
//! - koord-scheduler's bounded `CpuSet::parse` (resource-status, reservation
//!   and node annotations);
//! - koordlet's `CpuSet::parse_exact` (pod annotations) and its lenient
//!   `FromStr` (cgroup files, node annotations);
//! - koord-manager's `count_cpu_list` (the node-reservation annotation).
//!
//! Errors are fine; a panic, a hang or unbounded memory is a finding. A list
//! that parses must print back to the same set.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };

    if let Ok(set) = koord_scheduler::cpuset::CpuSet::parse(text) {
        let printed = set.to_string();
        let again = koord_scheduler::cpuset::CpuSet::parse(&printed)
            .unwrap_or_else(|e| panic!("scheduler cpuset {printed:?} does not parse back: {e}"));
        assert!(
            again == set,
            "scheduler cpuset {text:?} printed as {printed:?}"
        );
        assert_eq!(set.len(), set.iter().count());
        assert_eq!(set.len(), set.to_btree().len());
    }

    use koordlet::system::units::CpuSet;
    if let Ok(set) = CpuSet::parse_exact(text) {
        let printed = set.to_string();
        let again = CpuSet::parse_exact(&printed)
            .unwrap_or_else(|e| panic!("koordlet cpuset {printed:?} does not parse back: {e}"));
        assert!(
            again == set,
            "koordlet cpuset {text:?} printed as {printed:?}"
        );
        assert_eq!(set.len(), set.iter().count());
    }
    if let Ok(set) = text.parse::<CpuSet>() {
        let printed = set.to_string();
        let again: CpuSet = printed
            .parse()
            .unwrap_or_else(|e| panic!("koordlet cpuset {printed:?} does not parse back: {e}"));
        assert!(
            again == set,
            "koordlet cpuset {text:?} printed as {printed:?}"
        );
    }

    let _ = koord_manager::slo_controller::resources::count_cpu_list(text);
});
