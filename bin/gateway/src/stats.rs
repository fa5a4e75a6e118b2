//! What the binary itself counts, beside what the components count: requests by route and status (the router
//! counts them), events that streams could not deliver, and the database gauges a scrape last read. `GET /metrics`
//! (metrics.rs) reads them; the state holds them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway_core::runtime::stats::{Counter, DurationHistogram};

/// The `route` label of requests whose path names no route (their 404s).
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// The statuses the gateway answers with, each with its own series; any other counts under [`OTHER_STATUS`]. A
/// fixed list keeps the table (and the label's cardinality) bounded and a request's cell one index away.
const STATUSES: [u16; 22] =
    [200, 201, 202, 204, 304, 400, 401, 403, 404, 405, 408, 409, 410, 413, 415, 421, 422, 429, 500, 502, 503, 504];
const OTHER_STATUS: &str = "other";

/// Latency bounds of the HTTP histogram: most answers take well under a millisecond; a heartbeat waits for its
/// group commit; the long tail is a slow database.
const LATENCY_BOUNDS: &[Duration] = &[
    Duration::from_micros(100),
    Duration::from_micros(250),
    Duration::from_micros(500),
    Duration::from_millis(1),
    Duration::from_micros(2_500),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(5),
];

/// Requests by route and status, each cell a latency histogram (its count is the request counter). `routes` are
/// the router's route names, the last of them [`UNMATCHED_ROUTE`].
#[derive(Debug)]
pub(crate) struct HttpStats {
    routes: &'static [&'static str],
    cells: Box<[DurationHistogram]>,
}

impl HttpStats {
    pub(crate) fn new(routes: &'static [&'static str]) -> Self {
        let cells = (0..routes.len() * (STATUSES.len() + 1)).map(|_| DurationHistogram::new(LATENCY_BOUNDS)).collect();
        Self { routes, cells }
    }

    /// Counts one answered request of route `route` (an index into the route names).
    pub(crate) fn observe(&self, route: usize, status: u16, latency: Duration) {
        let status = STATUSES.iter().position(|known| *known == status).unwrap_or(STATUSES.len());
        if let Some(cell) = self.cells.get(route * (STATUSES.len() + 1) + status) {
            cell.observe(latency);
        }
    }

    /// Every cell that has counted a request: route name, status label, the cell.
    pub(crate) fn used(&self) -> impl Iterator<Item = (&'static str, String, &DurationHistogram)> {
        self.cells.chunks(STATUSES.len() + 1).zip(self.routes).flat_map(|(row, route)| {
            row.iter().enumerate().filter(|(_, cell)| cell.count() > 0).map(move |(status, cell)| {
                let label = STATUSES.get(status).map_or_else(|| OTHER_STATUS.to_owned(), u16::to_string);
                (*route, label, cell)
            })
        })
    }
}

/// What the binary itself counts, beside what the components count.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub(crate) http: HttpStats,
    /// Events that event streams could not deliver (their client read too slowly, or the bus overflowed).
    pub(crate) lagged_events: Arc<Counter>,
    /// The database gauges and when they were counted; the lock also makes concurrent scrapes share one count.
    pub(crate) store_gauges: tokio::sync::Mutex<Option<(Instant, StoreGauges)>>,
}

impl Metrics {
    pub(crate) fn new(routes: &'static [&'static str]) -> Self {
        Self {
            http: HttpStats::new(routes),
            lagged_events: Arc::new(Counter::new()),
            store_gauges: tokio::sync::Mutex::new(None),
        }
    }
}

/// The gauges a scrape asks the database for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreGauges {
    pub(crate) pending_jobs: u64,
    pub(crate) dead_letters: u64,
    pub(crate) due_backlog: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_count_in_their_route_and_status_cell_and_unknown_statuses_share_one() {
        let stats = HttpStats::new(&["heartbeat", "healthz", UNMATCHED_ROUTE]);
        stats.observe(0, 200, Duration::from_micros(300));
        stats.observe(0, 200, Duration::from_millis(3));
        stats.observe(0, 422, Duration::from_micros(50));
        stats.observe(2, 404, Duration::from_micros(10));
        stats.observe(1, 418, Duration::from_micros(10));
        stats.observe(1, 299, Duration::from_micros(10));
        stats.observe(9, 200, Duration::from_micros(10));
        let used: Vec<(&str, String, u64)> =
            stats.used().map(|(route, status, cell)| (route, status, cell.count())).collect();
        assert_eq!(
            used,
            [
                ("heartbeat", "200".to_owned(), 2),
                ("heartbeat", "422".to_owned(), 1),
                ("healthz", OTHER_STATUS.to_owned(), 2),
                (UNMATCHED_ROUTE, "404".to_owned(), 1),
            ],
            "a route index past the table counts nowhere"
        );
    }

    #[test]
    fn every_status_the_error_type_knows_has_its_own_series() {
        assert!(STATUSES.windows(2).all(|pair| pair[0] < pair[1]));
        for status in [200, 201, 202, 204, 400, 401, 403, 404, 405, 408, 409, 413, 415, 421, 422, 429, 500, 503] {
            assert!(STATUSES.contains(&status), "{status}");
        }
    }
}
