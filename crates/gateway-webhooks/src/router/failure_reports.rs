//! Throttled reports of inbound signature failures: a sender that floods a webhook with bad signatures must not
//! flood the log and the `gateway:webhooks` topic too. Per webhook id, the first failure of a window is logged and
//! published; the rest are counted, and the count goes out with the next report.

use std::collections::HashMap;
use std::sync::Mutex;

use gateway_core::runtime::sync::lock;
use time::{Duration, OffsetDateTime};

/// At most one log line and one `webhook_signature_failure` event per webhook id per interval.
pub const SIGNATURE_FAILURE_REPORT_INTERVAL: Duration = Duration::seconds(10);

#[derive(Debug, Default)]
pub(crate) struct SignatureFailureReports {
    by_webhook: Mutex<HashMap<i64, Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    reported_at: OffsetDateTime,
    suppressed: u64,
}

impl SignatureFailureReports {
    /// Counts a failure at `now`. `Some(n)` when this one is to be reported, `n` being how many were suppressed
    /// since the last report of this webhook; `None` when it is to be suppressed.
    pub(crate) fn failure(&self, webhook_id: i64, now: OffsetDateTime) -> Option<u64> {
        let mut by_webhook = lock(&self.by_webhook);
        match by_webhook.get_mut(&webhook_id) {
            Some(window) if now < window.reported_at + SIGNATURE_FAILURE_REPORT_INTERVAL => {
                window.suppressed = window.suppressed.saturating_add(1);
                None
            }
            Some(window) => {
                let suppressed = std::mem::take(&mut window.suppressed);
                window.reported_at = now;
                Some(suppressed)
            }
            None => {
                // Bounded by the number of configs: only a webhook id that exists gets this far.
                by_webhook.insert(webhook_id, Window { reported_at: now, suppressed: 0 });
                Some(0)
            }
        }
    }

    /// Forgets a deleted config.
    pub(crate) fn forget(&self, webhook_id: i64) {
        lock(&self.by_webhook).remove(&webhook_id);
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn one_report_per_webhook_per_interval_with_the_count_of_the_rest() {
        let reports = SignatureFailureReports::default();
        let start = datetime!(2026-02-22 12:00:00 UTC);
        assert_eq!(reports.failure(1, start), Some(0));
        assert_eq!(reports.failure(2, start), Some(0), "another webhook has its own window");
        for second in 1..10 {
            assert_eq!(reports.failure(1, start + Duration::seconds(second)), None);
        }
        assert_eq!(reports.failure(1, start + Duration::seconds(10)), Some(9));
        assert_eq!(reports.failure(1, start + Duration::seconds(25)), Some(0));
        reports.forget(1);
        assert_eq!(reports.failure(1, start + Duration::seconds(26)), Some(0));
    }
}
