//! The audit trail: a bounded ring of recent cgroup writes (time, file, old
//! value, new value, reason, result), served as JSON.

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

/// Keeps the newest `capacity` records.
#[derive(Debug, Clone)]
pub struct AuditRing {
    capacity: usize,
    records: VecDeque<AuditRecord>,
}

impl AuditRing {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            records: VecDeque::with_capacity(capacity.min(1024)),
        }
    }

    pub fn push(&mut self, record: AuditRecord) {
        if self.capacity == 0 {
            return;
        }
        while self.records.len() >= self.capacity {
            self.records.pop_front();
        }
        self.records.push_back(record);
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

/// Path of the audit endpoint served by [`audit_router`].
pub const AUDIT_PATH: &str = "/resource-executor/writes";

/// Records returned when the request gives no `limit`.
pub const DEFAULT_AUDIT_LIMIT: usize = 100;

#[derive(Debug, serde::Deserialize)]
struct AuditQuery {
    limit: Option<usize>,
}

/// `GET /resource-executor/writes[?limit=N]`: the executor's recent writes as
/// a JSON array of [`AuditRecord`], newest first (default 100 records). Merge
/// the returned router into koordlet's local HTTP server.
pub fn audit_router(executor: super::ResourceExecutor) -> axum::Router {
    use axum::extract::{Query, State};
    axum::Router::new()
        .route(
            AUDIT_PATH,
            axum::routing::get(
                |State(executor): State<super::ResourceExecutor>,
                 Query(query): Query<AuditQuery>| async move {
                    axum::Json(executor.recent_writes(query.limit.unwrap_or(DEFAULT_AUDIT_LIMIT)))
                },
            ),
        )
        .with_state(executor)
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
