//! Rules every [`AdminTokenStore`] must keep: nothing is stored at first; the first insert stores its token and
//! any later one changes nothing, even when several race; a replacement takes the stored token's place. Instants
//! carry milliseconds, which every backend keeps exactly.

use time::{Duration, OffsetDateTime};

use crate::{AdminTokenRecord, AdminTokenStore, TokenHash};

fn record(token: &str, set_at: OffsetDateTime) -> AdminTokenRecord {
    AdminTokenRecord { token_hash: TokenHash::of(token), set_at }
}

/// An empty store holds no token; the first insert stores its record, which reads back whole, and a second
/// insert is refused without changing it. Expects an empty store.
pub fn the_first_insert_stores_the_token_and_later_ones_change_nothing(
    store: &dyn AdminTokenStore,
    at: OffsetDateTime,
) {
    assert_eq!(store.admin_token().expect("read"), None);
    let first = record("first", at + Duration::milliseconds(250));
    assert!(store.insert_admin_token(&first).expect("insert"));
    assert_eq!(store.admin_token().expect("read"), Some(first));
    let second = record("second", at + Duration::seconds(1));
    assert!(!store.insert_admin_token(&second).expect("insert"), "a token is stored already");
    assert_eq!(store.admin_token().expect("read"), Some(first), "the first one stands");
}

/// Inserts racing from several threads (several instances starting at once): exactly one stores its token, and
/// it is the one every later read finds. Expects an empty store.
pub fn of_racing_inserts_exactly_one_stores_its_token(store: &dyn AdminTokenStore, at: OffsetDateTime) {
    let barrier = std::sync::Barrier::new(4);
    let outcomes: Vec<(AdminTokenRecord, bool)> = std::thread::scope(|scope| {
        let racers: Vec<_> = (0..4)
            .map(|n| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mine = record(&format!("instance-{n}"), at);
                    barrier.wait();
                    (mine, store.insert_admin_token(&mine).expect("insert"))
                })
            })
            .collect();
        racers.into_iter().map(|racer| racer.join().expect("racer")).collect()
    });
    let winners: Vec<&AdminTokenRecord> = outcomes.iter().filter(|(_, stored)| *stored).map(|(mine, _)| mine).collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    assert_eq!(store.admin_token().expect("read"), Some(*winners[0]));
}

/// A replacement takes the stored token's place (a rotation), and on an empty store is the first token. Expects an
/// empty store.
pub fn a_replacement_takes_the_stored_tokens_place(store: &dyn AdminTokenStore, at: OffsetDateTime) {
    let first = record("first", at);
    store.replace_admin_token(&first).expect("replace on an empty store");
    assert_eq!(store.admin_token().expect("read"), Some(first));
    let rotated = record("rotated", at + Duration::milliseconds(1_500));
    store.replace_admin_token(&rotated).expect("replace");
    assert_eq!(store.admin_token().expect("read"), Some(rotated));
    assert!(!store.insert_admin_token(&first).expect("insert"), "a rotated token is a stored token");
    assert_eq!(store.admin_token().expect("read"), Some(rotated));
}
