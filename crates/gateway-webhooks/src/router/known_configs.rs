//! The ids of the configs that exist, held in memory, so that an inbound request for an id that names nothing is
//! refused before its body is read and without a database read: anyone on the internet can spray made-up ids.
//!
//! The set is read whole from the store (ids only) when a request asks for an id it does not hold, at most once per
//! [`CONFIG_IDS_REFRESH_INTERVAL`]; this instance's own creates and deletes change it at once. So a config created
//! on another instance of a cluster is refused here (404) for at most that interval after its creation; a config
//! deleted elsewhere stays in the set until a request for it reads the store, finds nothing, and takes it out.
//! An attacker spraying ids costs at most one read of the id list per interval, whatever the rate.

use std::collections::HashSet;
use std::sync::Mutex;

use gateway_core::runtime::sync::lock;
use time::OffsetDateTime;

/// Longest a config created on another instance is unknown here; also the fewest seconds between two reads of the
/// id list, however many unknown ids are asked for.
pub const CONFIG_IDS_REFRESH_INTERVAL: time::Duration = time::Duration::seconds(1);

#[derive(Debug, Default)]
pub(crate) struct KnownConfigs {
    state: Mutex<Known>,
    /// Held by the one request that reads the id list, and by a create (whose new id a read that started before
    /// the create committed would otherwise drop again).
    pub(crate) writing: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Known {
    ids: HashSet<i64>,
    /// The list has been read at least once: until then a miss says nothing.
    loaded: bool,
    /// When the list was last read, or a read tried.
    read_at: Option<OffsetDateTime>,
}

/// What the set says of an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    Known,
    Unknown,
    /// Not in the set, and the set may be stale: read the list (under [`KnownConfigs::writing`]).
    ReadDue,
    /// Not in the set, which has never been read, and a read was started within the interval: it is under way
    /// (wait for it under [`KnownConfigs::writing`]) or failed.
    NotLoaded,
}

impl KnownConfigs {
    pub(crate) fn lookup(&self, id: i64, now: OffsetDateTime) -> Lookup {
        let known = lock(&self.state);
        if known.ids.contains(&id) {
            return Lookup::Known;
        }
        // A clock that went back counts as due, so a stepped clock cannot freeze the set.
        let due = known.read_at.is_none_or(|at| now >= at + CONFIG_IDS_REFRESH_INTERVAL || now < at);
        match (due, known.loaded) {
            (true, _) => Lookup::ReadDue,
            (false, true) => Lookup::Unknown,
            (false, false) => Lookup::NotLoaded,
        }
    }

    /// A read of the list starts at `now` (counted even if it fails, so a failing store is not asked on every
    /// request either).
    pub(crate) fn reading(&self, now: OffsetDateTime) {
        lock(&self.state).read_at = Some(now);
    }

    pub(crate) fn replace(&self, ids: Vec<i64>) {
        let mut known = lock(&self.state);
        known.ids = ids.into_iter().collect();
        known.loaded = true;
    }

    pub(crate) fn insert(&self, id: i64) {
        lock(&self.state).ids.insert(id);
    }

    pub(crate) fn remove(&self, id: i64) {
        lock(&self.state).ids.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const START: OffsetDateTime = datetime!(2026-02-22 12:00:00 UTC);

    #[test]
    fn a_miss_asks_for_a_read_at_most_once_per_interval_and_never_before_the_first_read() {
        let known = KnownConfigs::default();
        assert_eq!(known.lookup(1, START), Lookup::ReadDue, "never read");
        known.reading(START);
        assert_eq!(known.lookup(1, START), Lookup::NotLoaded, "a read failed: no answer from an empty set");
        let later = START + CONFIG_IDS_REFRESH_INTERVAL;
        assert_eq!(known.lookup(1, later), Lookup::ReadDue);
        known.reading(later);
        known.replace(vec![1, 2]);
        assert_eq!(known.lookup(1, later), Lookup::Known);
        assert_eq!(known.lookup(3, later + time::Duration::milliseconds(999)), Lookup::Unknown);
        assert_eq!(known.lookup(3, later + CONFIG_IDS_REFRESH_INTERVAL), Lookup::ReadDue);
        assert_eq!(known.lookup(3, later - time::Duration::seconds(5)), Lookup::ReadDue, "the clock went back");
        known.insert(3);
        known.remove(1);
        assert_eq!(known.lookup(3, later), Lookup::Known);
        assert_eq!(known.lookup(1, later), Lookup::Unknown);
    }
}
