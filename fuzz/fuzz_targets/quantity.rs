//! The exact Kubernetes quantity parser (`apis::extension::QuantityValue`,
//! which every resource amount from a pod, node or quota goes through) and
//! the Go duration parser (`GoDuration`, gang wait times and the like).
//!
//! A value that parses must print, in both canonical forms, to text that
//! parses back to the same value.
#![no_main]

use apis::extension::{GoDuration, QuantityValue};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };

    if let Ok(value) = QuantityValue::parse(text) {
        for printed in [value.to_decimal_si(), value.to_binary_si()] {
            let again = QuantityValue::parse(&printed)
                .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
            assert_eq!(again, value, "{text:?} printed as {printed:?}");
        }
        let _ = (value.value(), value.milli_value());
        let _ = (value.checked_value(), value.checked_milli_value());
        let _ = value.checked_add(value);
        let quantity = Quantity(text.to_owned());
        let _ = apis::extension::milli_value_of(&quantity);
        let _ = apis::extension::value_of(&quantity);
    }

    if let Ok(duration) = GoDuration::parse(text) {
        let printed = duration.to_string();
        let again = GoDuration::parse(&printed)
            .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
        assert_eq!(again, duration, "{text:?} printed as {printed:?}");
        let _ = duration.to_std();
    }
});
