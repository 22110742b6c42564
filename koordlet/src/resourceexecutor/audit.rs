//! The audit trail: a bounded ring of recent cgroup writes (time, file, old
//! value, new value, reason, result), served as JSON by [`super::http`].
//!
//! Bounded twice (issue 16): every text field is cut to
//! [`crate::bounds::MAX_LOGGED_BYTES`] plus its length, and the ring holds at
//! most [`DEFAULT_AUDIT_MAX_BYTES`] of records besides its record count, so
//! hostile paths cannot make the endpoint serve hundreds of megabytes.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::system::cgroup::CgroupResource;

/// One attempted write. Serialized as camelCase JSON:
/// `{"time": "2024-05-01T12:00:00.123Z", "path": "...", "resource": "cpu.cfs_quota_us",
///   "oldValue": "-1", "newValue": "20000", "reason": "...", "result": "written"}`
/// (`error` is present when `result` is `"failed"`; `oldValue` is absent when
/// the file was not read, e.g. for `cgroup.procs`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// RFC 3339, UTC, millisecond precision.
    pub time: String,
    pub path: String,
    pub resource: CgroupResource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_value: Option<String>,
    /// The content written (in the running cgroup version's syntax).
    pub new_value: String,
    pub reason: String,
    pub result: AuditResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum AuditResult {
    Written,
    Failed,
}

/// Bytes of records the ring keeps by default (about 1,000 records of
/// typical size; a record with every field at its cut length is ~1.5 KiB).
pub const DEFAULT_AUDIT_MAX_BYTES: usize = 1 << 20;

impl AuditRecord {
    /// The record with every text field cut for keeping.
    fn bounded(self) -> Self {
        use crate::bounds::cut;
        Self {
            time: cut(self.time),
            path: cut(self.path),
            resource: self.resource,
            old_value: self.old_value.map(cut),
            new_value: cut(self.new_value),
            reason: cut(self.reason),
            result: self.result,
            error: self.error.map(cut),
        }
    }

    /// What the record costs in the ring: its text plus a fixed overhead
    /// for the keys and the other fields.
    fn weight(&self) -> usize {
        const OVERHEAD: usize = 128;
        OVERHEAD
            + self.time.len()
            + self.path.len()
            + self.old_value.as_ref().map_or(0, String::len)
            + self.new_value.len()
            + self.reason.len()
            + self.error.as_ref().map_or(0, String::len)
    }
}

/// Keeps the newest `capacity` records, at most `max_bytes` of them.
#[derive(Debug, Clone)]
pub struct AuditRing {
    capacity: usize,
    max_bytes: usize,
    bytes: usize,
    records: VecDeque<AuditRecord>,
}

impl AuditRing {
    pub fn new(capacity: usize) -> Self {
        Self::with_max_bytes(capacity, DEFAULT_AUDIT_MAX_BYTES)
    }

    pub fn with_max_bytes(capacity: usize, max_bytes: usize) -> Self {
        Self {
            capacity,
            max_bytes,
            bytes: 0,
            records: VecDeque::with_capacity(capacity.min(1024)),
        }
    }

    pub fn push(&mut self, record: AuditRecord) {
        if self.capacity == 0 {
            return;
        }
        let record = record.bounded();
        let weight = record.weight();
        while !self.records.is_empty()
            && (self.records.len() >= self.capacity || self.bytes + weight > self.max_bytes)
        {
            if let Some(old) = self.records.pop_front() {
                self.bytes = self.bytes.saturating_sub(old.weight());
            }
        }
        self.bytes += weight;
        self.records.push_back(record);
    }

    /// What the kept records weigh (see [`DEFAULT_AUDIT_MAX_BYTES`]).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Up to `limit` records, newest first.
    pub fn recent(&self, limit: usize) -> Vec<AuditRecord> {
        self.records.iter().rev().take(limit).cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for a wall-clock time (the epoch if earlier).
pub fn rfc3339_utc(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since_epoch.as_secs();
    let millis = since_epoch.subsec_millis();
    let days = (seconds / 86_400) as i64;
    let second_of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's era-based method).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(n: usize) -> AuditRecord {
        AuditRecord {
            time: rfc3339_utc(UNIX_EPOCH),
            path: format!("/cg/{n}"),
            resource: CgroupResource::CpuShares,
            old_value: None,
            new_value: n.to_string(),
            reason: "r".to_string(),
            result: AuditResult::Written,
            error: None,
        }
    }

    #[test]
    fn ring_keeps_newest_first_and_is_bounded() {
        let mut ring = AuditRing::new(3);
        for n in 0..5 {
            ring.push(record(n));
        }
        assert_eq!(ring.len(), 3);
        let newest: Vec<_> = ring.recent(10).into_iter().map(|r| r.new_value).collect();
        assert_eq!(newest, ["4", "3", "2"]);
        assert_eq!(ring.recent(1)[0].new_value, "4");
        let mut disabled = AuditRing::new(0);
        disabled.push(record(1));
        assert!(disabled.is_empty());
    }

    /// Issue 16: a 10 MB path (a hostile cgroup parent) is cut to a few
    /// hundred bytes that say how long it was.
    #[test]
    fn a_10_mb_path_is_cut() {
        let huge = "/kubepods/besteffort/".to_string() + &"a".repeat(10 << 20);
        let mut ring = AuditRing::new(8);
        let mut r = record(1);
        r.path = huge.clone();
        r.error = Some(format!("cannot write to {huge}: File name too long"));
        ring.push(r);
        let newest = &ring.recent(1)[0];
        assert!(
            newest.path.len() <= 300,
            "path kept whole: {} bytes",
            newest.path.len()
        );
        assert!(newest.path.starts_with("/kubepods/besteffort/aaa"));
        assert!(
            newest.path.ends_with(&format!("({} bytes)", huge.len())),
            "{}",
            &newest.path[newest.path.len().saturating_sub(40)..]
        );
        let error = newest.error.as_deref().unwrap_or_default();
        assert!(
            error.len() <= 300,
            "error kept whole: {} bytes",
            error.len()
        );
    }

    /// Issue 16: the ring is bounded in bytes too, not only in records.
    #[test]
    fn the_ring_is_bounded_in_bytes() {
        let mut ring = AuditRing::new(100_000);
        let long = "x".repeat(250);
        for n in 0..20_000 {
            let mut r = record(n);
            r.path = format!("{long}{n}");
            r.reason = long.clone();
            r.old_value = Some(long.clone());
            r.error = Some(long.clone());
            ring.push(r);
        }
        let served: usize = ring
            .recent(usize::MAX)
            .iter()
            .map(|r| serde_json::to_string(r).map_or(0, |json| json.len()))
            .sum();
        assert!(served <= 2 << 20, "the ring serves {served} bytes");
        // The newest records are the ones kept.
        assert!(ring.recent(1)[0].path.ends_with("19999"));
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400, "2000-02-29T00:00:00.000Z"),
            (1_700_000_000, "2023-11-14T22:13:20.000Z"),
            (4_107_542_399, "2100-02-28T23:59:59.000Z"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(
                rfc3339_utc(UNIX_EPOCH + Duration::from_secs(seconds)),
                expected
            );
        }
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH + Duration::from_millis(1_500)),
            "1970-01-01T00:00:01.500Z"
        );
    }

    #[test]
    fn record_json_shape() {
        let mut r = record(7);
        r.old_value = Some("-1".to_string());
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["resource"], "cpu.shares");
        assert_eq!(json["oldValue"], "-1");
        assert_eq!(json["newValue"], "7");
        assert_eq!(json["result"], "written");
        assert!(json.get("error").is_none());
    }
}
