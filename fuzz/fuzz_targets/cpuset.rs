//! CPU list parsers (`0-3,8`), the text of annotations anyone who may create
//! a pod, a Reservation or annotate a node can write:
//!
//! - `koord_common::units::CpuSet`'s three readings: `parse_each_cpu_once`
//!   (koord-scheduler's resource-status, reservation and node annotations),
//!   `parse_exact` (koordlet's pod annotations) and `FromStr` (cgroup files,
//!   kubelet state; repeats merged);
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

    if let Ok(set) = koord_scheduler::cpuset::CpuSet::parse_each_cpu_once(text) {
        let printed = set.to_string();
        let again = koord_scheduler::cpuset::CpuSet::parse_each_cpu_once(&printed)
            .unwrap_or_else(|e| panic!("scheduler cpuset {printed:?} does not parse back: {e}"));
        assert!(
            again == set,
            "scheduler cpuset {text:?} printed as {printed:?}"
        );
        assert_eq!(set.len(), set.iter().count());
        assert_eq!(set.len(), set.to_btree::<i32>().len());
    }

    use koord_common::units::CpuSet;
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
