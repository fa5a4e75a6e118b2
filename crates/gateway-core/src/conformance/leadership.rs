//! Rules every [`Leadership`] must keep: a term answers one token for as long as it lasts (renewing a lease does not
//! change it); a leader that was deposed answers `None`; a later term never has an older token; once `fenced(t)`
//! (a store refused a write under `t`: a newer term wrote), `t` is never answered again and the next term is newer;
//! a report about any other term changes nothing.
//!
//! [`Leadership::current`] is read by every loop cycle, so every rule reads it as the loops do, and the fixture
//! moves the implementation between terms the way its deployment does ([`LeadershipFixture`]). A single process
//! leads alone by definition: nothing deposes it, no newer term exists to make a store refuse its token, and so the
//! rules about terms ending do not apply to it (its fixture says so, [`LeadershipFixture::deposable`]). The rules are
//! async, for an adapter whose own loop keeps the lease: the suite's macro runs each on a runtime of its own.

use std::future::Future;
use std::time::Duration;

use crate::{FencingToken, Leadership};

/// How a rule gets the implementation under test and moves it between terms.
pub trait LeadershipFixture {
    /// The implementation under test.
    fn leadership(&self) -> &dyn Leadership;

    /// Lets it lead (for a lease: nobody else holds it) and returns the token it answers once it does.
    fn lead(&self) -> impl Future<Output = FencingToken>;

    /// Whether anything can end its terms: `false` for a single process, which leads alone.
    fn deposable(&self) -> bool {
        true
    }

    /// Ends its term the way its deployment does besides `fenced` (a lease lost to another instance, leadership
    /// switched off), and returns once `current()` answers `None`. Called only when [`Self::deposable`].
    fn depose(&self) -> impl Future<Output = ()>;

    /// Long enough for the implementation's own periodic work to happen twice (a lease: two renewals); zero for one
    /// without any.
    fn a_while(&self) -> Duration;
}

/// How often the rules read `current()` while they watch a term.
const WATCH_STEPS: u32 = 12;

/// Watches `current()` for the fixture's while, panicking, with `what`, when `check` refuses an answer.
async fn watch<F: LeadershipFixture + ?Sized>(fixture: &F, what: &str, check: impl Fn(Option<FencingToken>) -> bool) {
    let step = fixture.a_while() / WATCH_STEPS;
    for _ in 0..WATCH_STEPS {
        let current = fixture.leadership().current();
        assert!(check(current), "{what}: answered {current:?}");
        if step.is_zero() {
            return;
        }
        tokio::time::sleep(step).await;
    }
}

/// A leader answers its term's token, the same at every read, for as long as the term lasts.
pub async fn a_term_answers_one_token_while_it_lasts<F: LeadershipFixture + ?Sized>(fixture: &F) {
    let token = fixture.lead().await;
    watch(fixture, "a leader whose term goes on", |current| current == Some(token)).await;
}

/// A leader that was deposed answers `None` at once: its loops stop leader-only work.
pub async fn a_deposed_leader_answers_none<F: LeadershipFixture + ?Sized>(fixture: &F) {
    if !fixture.deposable() {
        return;
    }
    fixture.lead().await;
    fixture.depose().await;
    assert_eq!(fixture.leadership().current(), None, "a deposed leader");
}

/// A later term's token is never older than an earlier one's: the store that saw the earlier term's writes must
/// take the later term's.
pub async fn a_later_term_never_has_an_older_token<F: LeadershipFixture + ?Sized>(fixture: &F) {
    let first = fixture.lead().await;
    if fixture.deposable() {
        fixture.depose().await;
    }
    let second = fixture.lead().await;
    assert!(second >= first, "a term under {second:?} after one under {first:?}");
}

/// Once `fenced(t)`, `t` is never answered again, starting with the next read; the next term's token is newer than
/// `t`, so the store takes its writes.
pub async fn once_fenced_a_token_is_never_answered_again<F: LeadershipFixture + ?Sized>(fixture: &F) {
    if !fixture.deposable() {
        return;
    }
    let fenced = fixture.lead().await;
    fixture.leadership().fenced(fenced);
    watch(fixture, "after fenced", |current| current != Some(fenced)).await;
    let next = fixture.lead().await;
    assert!(next > fenced, "a term under {next:?} after {fenced:?} was fenced");
}

/// A report about a term that is not the current one (an older term's write refused late, or a token never
/// answered) changes nothing.
pub async fn a_report_about_another_term_changes_nothing<F: LeadershipFixture + ?Sized>(fixture: &F) {
    let token = fixture.lead().await;
    fixture.leadership().fenced(FencingToken(token.0 + 1));
    if let Some(older) = token.0.checked_sub(1) {
        fixture.leadership().fenced(FencingToken(older));
    }
    watch(fixture, "after reports about other terms", |current| current == Some(token)).await;
}
