//! Rules every [`HistoryStore`] must keep: counters add up across flushes (as several instances' flushes do),
//! maxima only rise, a read gives one subject's hours from an instant on, and pruning removes whole old hours.

use time::{Duration, OffsetDateTime};

use crate::HistoryStore;
use crate::ports::history::{HistoryPoint, HistorySeries, WHOLE_GATEWAY, hour_start};

fn point(hour: OffsetDateTime, series: HistorySeries, subject_id: i64, value: i64) -> HistoryPoint {
    HistoryPoint { hour_start: hour, series, subject_id, value }
}

/// Two instances' flushes of the same hour add their counters and keep the larger of their maxima, per subject;
/// a read gives the subject's points from its instant on, by hour. Expects an empty store.
pub fn flushes_add_counters_and_raise_maxima_per_hour_and_subject(store: &dyn HistoryStore, at: OffsetDateTime) {
    use HistorySeries::{CronLatenessMaxMs, Deliveries, Heartbeats, LiveAgents};
    let (earlier, hour) = (hour_start(at) - Duration::hours(1), hour_start(at));
    assert_eq!(store.history(earlier, WHOLE_GATEWAY).expect("read an empty store"), vec![]);
    store.record_history(&[], &[]).expect("an empty flush");
    store
        .record_history(
            &[point(earlier, Heartbeats, 0, 5), point(hour, Heartbeats, 0, 7), point(hour, Deliveries, 12, 2)],
            &[point(hour, LiveAgents, 0, 40), point(hour, CronLatenessMaxMs, 0, 250)],
        )
        .expect("one instance's flush");
    store
        .record_history(
            &[point(hour, Heartbeats, 0, 3), point(hour, Deliveries, 12, 1), point(hour, Deliveries, 0, 1)],
            &[point(hour, LiveAgents, 0, 35), point(hour, CronLatenessMaxMs, 0, 900)],
        )
        .expect("another instance's flush");
    assert_eq!(
        store.history(earlier, WHOLE_GATEWAY).expect("read"),
        vec![
            point(earlier, Heartbeats, 0, 5),
            point(hour, CronLatenessMaxMs, 0, 900),
            point(hour, Deliveries, 0, 1),
            point(hour, Heartbeats, 0, 10),
            point(hour, LiveAgents, 0, 40),
        ]
    );
    assert_eq!(store.history(hour, 12).expect("read"), vec![point(hour, Deliveries, 12, 3)]);
    assert_eq!(store.history(hour + Duration::hours(1), WHOLE_GATEWAY).expect("read"), vec![]);
}

/// Pruning deletes the hours before its instant, of every subject, and keeps the rest. Expects an empty store.
pub fn pruning_deletes_the_hours_before_its_instant(store: &dyn HistoryStore, at: OffsetDateTime) {
    let hour = hour_start(at);
    let hours: Vec<OffsetDateTime> = (0..50).map(|n| hour - Duration::hours(n)).collect();
    let added: Vec<HistoryPoint> = hours
        .iter()
        .flat_map(|start| {
            [point(*start, HistorySeries::CronFires, 0, 1), point(*start, HistorySeries::Deliveries, 3, 1)]
        })
        .collect();
    store.record_history(&added, &[]).expect("flush");
    let cut = hour - Duration::hours(47);
    assert_eq!(store.prune_history(cut).expect("prune"), 4, "two hours of two subjects");
    assert_eq!(store.prune_history(cut).expect("prune again"), 0);
    assert_eq!(store.history(hour - Duration::hours(60), WHOLE_GATEWAY).expect("read").len(), 48);
    assert_eq!(store.history(hour - Duration::hours(60), 3).expect("read").len(), 48);
    assert_eq!(store.history(cut, 3).expect("read").first().map(|point| point.hour_start), Some(cut));
}
