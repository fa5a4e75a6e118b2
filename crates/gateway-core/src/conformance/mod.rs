//! The rules every implementation of a port must keep, written once and run against each implementation: the
//! in-memory and in-process ones in this crate's tests, the database, Redis and bus adapters in theirs (through the
//! `conformance` feature).
//!
//! One suite per store port: [`heartbeat`], [`cron`], [`mailbox`], [`webhook`], [`liveness`], [`tool_call`],
//! [`credential`], [`admin_token`], [`storage`] (which writes through the ports it counts, so it takes all of them);
//! [`fencing`] holds the rule that spans ports (a token raised through one fences the others). Each rule is a
//! `pub fn` that takes a fresh, empty store and an instant to start from (rows are due, leases run and agents fall
//! silent relative to it), drives the store only through its port, and panics when the store breaks the rule; its
//! documentation says what it proves and what it expects of the store.
//!
//! One suite per coordination port, each run against the in-process implementation and the one shared between
//! instances: [`leadership`] ([`crate::Leadership`]), [`rate_limit`] ([`crate::RateLimiter`]), [`rate`]
//! ([`crate::DispatchRate`]) and [`event`] ([`crate::EventPublisher`]). Their rules take a fixture instead of a store,
//! which makes what a rule needs (a limiter of a given limit and window, a subscriber, a change of term) and says
//! how time passes for the implementation ([`timeline`]): exactly and instantly for an in-process one, on the real
//! clock, in fractions of a second, for one that keeps its own clock in Redis.
//!
//! Each suite has a macro that expands to one `#[test]` per rule, in a module named after the port, so adding a
//! rule to a suite runs it on every backend, and adding a backend is one line per suite:
//!
//! ```
//! mod in_memory {
//!     gateway_core::cron_store_conformance!(Some(Box::<gateway_core::InMemoryCronJobStore>::default()));
//!     gateway_core::webhook_store_conformance!(Some(Box::<gateway_core::InMemoryWebhookStore>::default()));
//! }
//! # fn main() {}
//! ```
//!
//! The argument is an expression evaluated once per test for a fresh store: an `Option<F>` where `F` dereferences
//! to the store (a `Box`, or a fixture that also holds the store's temporary directory). `None` skips the test, for
//! a backend that is not available where the tests run. The coordination suites' macros take the same, `F`
//! dereferencing to the suite's fixture; for the async suites it is evaluated on the rule's runtime ([`block_on`]).

pub mod admin_token;
pub mod credential;
pub mod cron;
pub mod event;
pub mod fencing;
pub mod heartbeat;
pub mod history;
pub mod leadership;
pub mod liveness;
pub mod mailbox;
pub mod rate;
pub mod rate_limit;
pub mod storage;
pub mod timeline;
pub mod tool_call;
pub mod webhook;

use std::future::Future;

use time::OffsetDateTime;

/// The instant the suites' macros start every rule from: fixed, so a failure reproduces exactly.
pub const START: OffsetDateTime = time::macros::datetime!(2026-02-22 12:00:00 UTC);

/// Runs an async rule to its end on a runtime of its own (one thread, with time and I/O): what the macros of the
/// async suites ([`leadership`], [`event`]) do for each rule. The fixture is made on that runtime, so it may spawn
/// the tasks an adapter needs (a lease's loop, a bridge's).
pub fn block_on<F: Future>(rule: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime for the rule").block_on(rule)
}

/// One `#[test]` per rule of `conformance::$suite`, in a module `$module`, each on a fresh store from `$fixture`.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($module:ident, $suite:ident, $fixture:expr; $($rule:ident),+ $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            $(
                #[test]
                fn $rule() {
                    let Some(fixture) = $fixture else { return };
                    $crate::conformance::$suite::$rule(&*fixture, $crate::conformance::START);
                }
            )+
        }
    };
}

/// Every rule of [`conformance::heartbeat`](crate::conformance::heartbeat) as a `#[test]`, in a module
/// `heartbeat_store`. `$fixture`: an `Option<F>` where `F` dereferences to a fresh [`crate::HeartbeatStore`] (see
/// the [module documentation](crate::conformance)).
#[macro_export]
macro_rules! heartbeat_store_conformance {
    ($fixture:expr) => {
        $crate::__conformance_tests!(heartbeat_store, heartbeat, $fixture;
            an_upsert_inserts_then_replaces_the_row_of_its_agent,
            the_last_record_of_an_agent_wins_within_one_call,
        );
    };
}

/// Every rule of [`conformance::cron`](crate::conformance::cron) as a `#[test]`, in a module `cron_store`.
/// `$fixture`: an `Option<F>` where `F` dereferences to a fresh [`crate::CronJobStore`] that is also a
/// [`crate::FencingEpoch`] (see the [module documentation](crate::conformance)).
#[macro_export]
macro_rules! cron_store_conformance {
    ($fixture:expr) => {
        $crate::__conformance_tests!(cron_store, cron, $fixture;
            rows_round_trip_and_list_in_keyset_pages,
            a_group_insert_returns_its_rows_in_order,
            an_idempotency_key_is_unique_finds_its_job_and_is_freed_with_it,
            a_group_with_held_keys_returns_the_holders_and_inserts_the_rest,
            pending_fires_come_soonest_first_ties_by_id_up_to_the_limit,
            one_claim_per_instant_until_the_lease_runs_out,
            claim_ahead_takes_rows_due_by_its_margin_but_judges_leases_by_now,
            a_newer_term_takes_over_and_missing_rows_are_not_claimed,
            a_newer_term_claims_a_deposed_leaders_fire_at_once_an_equal_term_waits_for_its_lease,
            batches_claim_what_they_can,
            advancing_moves_the_row_to_its_next_instant_and_clears_the_claim_once,
            completing_one_batch_and_claiming_the_next_is_one_call,
            fencing_refuses_older_tokens_whole_and_newer_ones_raise_the_epoch,
            an_agents_one_time_jobs_are_counted_and_listed_soonest_first,
            a_one_time_job_is_deleted_only_for_its_agent_and_not_while_claimed,
            a_paused_job_keeps_its_row_but_is_neither_due_nor_claimable_until_resumed,
            a_claim_taken_before_a_pause_completes_and_the_row_stays_paused,
            every_row_counts_as_a_job_until_it_is_deleted,
            a_jobs_time_zone_round_trips_through_every_read,
            an_agents_recurring_jobs_are_counted_listed_and_deleted_only_for_it,
        );
    };
}

/// Every rule of [`conformance::tool_call`](crate::conformance::tool_call) as a `#[test]`, in a module
/// `tool_call_store`. `$fixture`: an `Option<F>` where `F` dereferences to a fresh [`crate::ToolCallStore`] (see
/// the [module documentation](crate::conformance)).
#[macro_export]
macro_rules! tool_call_store_conformance {
    ($fixture:expr) => {
        $crate::__conformance_tests!(tool_call_store, tool_call, $fixture;
            a_call_round_trips_under_its_agent_and_id,
            an_id_held_answers_with_its_row_unchanged,
            pruning_takes_old_calls_oldest_first_a_batch_at_a_time,
        );
    };
}

/// Every rule of [`conformance::mailbox`](crate::conformance::mailbox) as a `#[test]`, in a module
/// `mailbox_store`. `$fixture`: an `Option<F>` where `F` dereferences to a fresh [`crate::MailboxStore`] that is
/// also the [`crate::CronJobStore`] whose completions record the fires, and a [`crate::FencingEpoch`] (see the
/// [module documentation](crate::conformance)).
#[macro_export]
macro_rules! mailbox_store_conformance {
    ($fixture:expr) => {
        $crate::__conformance_tests!(mailbox_store, mailbox, $fixture;
            a_completion_records_each_published_fire_once,
            a_fenced_completion_records_nothing,
            reads_page_one_agents_entries_in_firing_order,
            a_receipt_marks_only_an_entry_a_completion_wrote_in_its_own_agents_mailbox,
            every_agents_newest_entries_are_read_after_a_cursor,
            pruning_deletes_the_old_entries_among_the_first_in_firing_order,
            runs_list_fires_and_skips_newest_first_outlive_their_job_and_stay_out_of_the_mailbox,
            pruning_the_mailbox_prunes_skipped_runs_by_the_same_cutoff,
        );
    };
}

/// Every rule of [`conformance::webhook`](crate::conformance::webhook) as a `#[test]`, in a module
/// `webhook_store`. `$fixture`: an `Option<F>` where `F` dereferences to a fresh [`crate::WebhookStore`] that is
/// also a [`crate::FencingEpoch`] (see the [module documentation](crate::conformance)).
#[macro_export]
macro_rules! webhook_store_conformance {
    ($fixture:expr) => {
        $crate::__conformance_tests!(webhook_store, webhook, $fixture;
            configs_round_trip_keep_their_secret_and_are_unique_per_source_and_event_type,
            an_update_changes_what_it_names_and_a_new_secret_keeps_the_previous_one,
            deleting_a_config_deletes_its_deliveries_their_attempts_and_their_keys,
            a_config_with_more_history_than_a_delete_batch_is_deleted_whole,
            a_delivery_is_inserted_pending_and_one_for_a_missing_config_is_a_conflict,
            an_idempotency_key_is_unique_and_finds_its_delivery,
            a_group_insert_fails_only_the_deliveries_a_constraint_refuses,
            a_group_inserted_to_its_configs_takes_their_targets_and_current_secrets,
            a_delivery_inserted_claimed_waits_for_its_lease_and_its_attempt_applies,
            an_applied_attempt_may_replace_the_signature,
            due_rows_are_oldest_first_across_pending_and_failed_ties_by_id_never_delivered_or_dead,
            a_claim_hides_the_row_until_its_lease_ends_and_only_the_claimant_records,
            claim_each_takes_each_row_by_its_own_due_time_and_record_attempts_answers_each,
            retry_now_resets_only_failed_or_dead_rows,
            the_inspector_filters_and_pages_by_id,
            pruning_takes_only_old_finished_deliveries_a_batch_at_a_time,
            the_polls_claims_are_fenced_older_tokens_refused_whole_newer_ones_raise_the_epoch,
            a_new_term_releases_the_polls_claims_of_older_terms_at_once,
            deliveries_count_by_status_and_the_due_ones_as_the_poll_sees_them,
            inbound_secrets_rotate_apart_and_revoke_previous_drops_every_previous_secret,
            a_fresh_receipt_makes_an_inbound_delivery_a_duplicate_that_writes_nothing,
            concurrent_inbound_deliveries_with_one_key_insert_exactly_once,
            receipts_are_pruned_by_age_a_batch_at_a_time_and_go_with_their_config,
            an_event_fans_out_to_every_matching_config_at_once_and_its_key_finds_it_again,
            a_fan_out_wider_than_its_bound_writes_nothing,
            concurrent_fan_outs_with_one_key_publish_exactly_once,
            recover_resets_the_dead_rows_of_one_config_in_a_window_a_batch_at_a_time,
            a_configs_own_rate_round_trips_and_due_rows_carry_it_or_are_skipped_by_config,
            failures_in_a_row_disable_a_config_once_and_hold_its_deliveries,
            a_group_of_records_counts_health_as_its_attempts_one_by_one,
            enabling_a_config_resumes_its_held_deliveries_and_disabling_by_hand_holds_them,
            endpoint_stats_count_the_windows_attempts_and_dead_letters,
            an_attempt_in_flight_when_its_config_is_disabled_records_and_its_retry_is_held,
            a_claim_that_lapsed_after_its_config_was_disabled_is_held_by_the_next_claim,
        );
    };
}

/// Every rule of [`conformance::liveness`](crate::conformance::liveness) as a `#[test]`, in a module
/// `liveness_map`. `$fixture`: an `Option<F>` where `F` dereferences to a fresh [`crate::LivenessMap`] that tracks
/// at most [`CAPACITY`](crate::conformance::liveness::CAPACITY) agents (see the
/// [module documentation](crate::conformance)).
#[macro_export]
macro_rules! liveness_map_conformance {
    ($fixture:expr) => {
        $crate::__conformance_tests!(liveness_map, liveness, $fixture;
            the_map_is_bounded_but_known_agents_update,
            live_agents_are_listed_in_pages_by_agent_id,
            following_the_cursor_lists_every_live_agent_among_evicted_ones,
            silent_agents_are_evicted_exactly_once,
            evictions_are_fenced_older_tokens_refused_whole_newer_ones_raise_the_epoch,
        );
    };
}

/// Every rule of [`conformance::credential`](crate::conformance::credential) as a `#[test]`, in a module
/// `agent_credential_store`. `$fixture`: an `Option<F>` where `F` dereferences to a fresh
/// [`crate::AgentCredentialStore`] (see the [module documentation](crate::conformance)).
#[macro_export]
macro_rules! agent_credential_store_conformance {
    ($fixture:expr) => {
        $crate::__conformance_tests!(agent_credential_store, credential, $fixture;
            a_credential_reads_back_as_issued_and_unknown_ids_read_as_none,
            a_credential_id_is_unique,
            the_revocation_poll_finds_the_credentials_revoked_since_its_instant,
            revocation_is_once_by_the_owning_agent_and_keeps_the_row,
            an_agents_credentials_list_by_id_in_pages,
            an_expiry_reads_back_by_id_and_in_the_list_and_survives_revocation,
            recorded_uses_only_move_last_use_forwards,
            all_credentials_list_across_agents_by_id_in_pages,
        );
    };
}

/// Every rule of [`conformance::admin_token`](crate::conformance::admin_token) as a `#[test]`, in a module
/// `admin_token_store`. `$fixture`: an `Option<F>` where `F` dereferences to a fresh [`crate::AdminTokenStore`]
/// (see the [module documentation](crate::conformance)).
#[macro_export]
macro_rules! admin_token_store_conformance {
    ($fixture:expr) => {
        $crate::__conformance_tests!(admin_token_store, admin_token, $fixture;
            the_first_insert_stores_the_token_and_later_ones_change_nothing,
            of_racing_inserts_exactly_one_stores_its_token,
            a_replacement_takes_the_stored_tokens_place,
        );
    };
}

/// Every rule of [`conformance::storage`](crate::conformance::storage) as a `#[test]`, in a module `agent_storage`.
/// `$fixture`: an `Option<F>` for a fresh store (see the [module documentation](crate::conformance)); `$parts`: a
/// function (a path) from `&F::Target` to the [`StorageParts`](crate::conformance::storage::StorageParts) of that store.
#[macro_export]
macro_rules! agent_storage_conformance {
    ($fixture:expr, $parts:expr) => {
        mod agent_storage {
            #[allow(unused_imports)]
            use super::*;

            $crate::__storage_conformance_tests!($fixture, $parts;
                an_agent_is_charged_for_its_answers_pending_reminders_and_mailbox,
                a_fire_moves_the_charge_to_the_mailbox_and_pruning_takes_it_off,
            );
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __storage_conformance_tests {
    ($fixture:expr, $parts:expr; $($rule:ident),+ $(,)?) => {
        $(
            #[test]
            fn $rule() {
                let Some(fixture) = $fixture else { return };
                let parts = ($parts)(&*fixture);
                $crate::conformance::storage::$rule(&parts, $crate::conformance::START);
            }
        )+
    };
}

/// One `#[test]` per rule of `conformance::$suite`, in a module `$module`, each on a fresh fixture from `$fixture`
/// (an `Option<F>` where `F` dereferences to the suite's fixture trait; `None` skips the test).
#[doc(hidden)]
#[macro_export]
macro_rules! __fixture_conformance_tests {
    ($module:ident, $suite:ident, $fixture:expr; $($rule:ident),+ $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            $(
                #[test]
                fn $rule() {
                    let Some(fixture) = $fixture else { return };
                    $crate::conformance::$suite::$rule(&*fixture);
                }
            )+
        }
    };
}

/// [`__fixture_conformance_tests`] for async rules: each test makes its fixture and runs its rule on a runtime of
/// its own ([`block_on`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __async_fixture_conformance_tests {
    ($module:ident, $suite:ident, $fixture:expr; $($rule:ident),+ $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;

            $(
                #[test]
                fn $rule() {
                    $crate::conformance::block_on(async {
                        let Some(fixture) = $fixture else { return };
                        $crate::conformance::$suite::$rule(&*fixture).await;
                    });
                }
            )+
        }
    };
}

/// Every rule of [`conformance::leadership`](crate::conformance::leadership) as a `#[test]`, in a module
/// `leadership`, each on a runtime of its own. `$fixture`: an `Option<F>` where `F` dereferences to a fresh
/// [`LeadershipFixture`](crate::conformance::leadership::LeadershipFixture), evaluated on that runtime (so it may
/// spawn tasks and `.await`).
#[macro_export]
macro_rules! leadership_conformance {
    ($fixture:expr) => {
        $crate::__async_fixture_conformance_tests!(leadership, leadership, $fixture;
            a_term_answers_one_token_while_it_lasts,
            a_deposed_leader_answers_none,
            a_later_term_never_has_an_older_token,
            once_fenced_a_token_is_never_answered_again,
            a_report_about_another_term_changes_nothing,
        );
    };
}

/// Every rule of [`conformance::rate_limit`](crate::conformance::rate_limit) as a `#[test]`, in a module
/// `rate_limiter`. `$fixture`: an `Option<F>` where `F` dereferences to a
/// [`RateLimiterFixture`](crate::conformance::rate_limit::RateLimiterFixture).
#[macro_export]
macro_rules! rate_limiter_conformance {
    ($fixture:expr) => {
        $crate::__fixture_conformance_tests!(rate_limiter, rate_limit, $fixture;
            the_limit_holds_within_a_window,
            agents_are_counted_apart,
            a_refused_request_is_told_when_its_window_ends,
            refused_requests_do_not_move_the_end_of_the_window,
            concurrent_requests_allow_exactly_the_limit,
        );
    };
}

/// Every rule of [`conformance::rate`](crate::conformance::rate) as a `#[test]`, in a module `dispatch_rate`.
/// `$fixture`: an `Option<F>` where `F` dereferences to a
/// [`DispatchRateFixture`](crate::conformance::rate::DispatchRateFixture).
#[macro_export]
macro_rules! dispatch_rate_conformance {
    ($fixture:expr) => {
        $crate::__fixture_conformance_tests!(dispatch_rate, rate, $fixture;
            never_more_than_the_limit_start_in_a_window,
            a_refused_start_is_told_when_one_may_start,
            the_window_slides_one_start_at_a_time,
            a_cancelled_start_gives_its_place_back_once,
            cancelling_a_start_that_left_the_window_frees_nothing,
            concurrent_starts_take_exactly_the_limit_with_distinct_tickets,
        );
    };
}

/// Every rule of [`conformance::rate`](crate::conformance::rate) for an [`crate::EndpointRate`], in a module
/// `endpoint_rate`. `$fixture`: an `Option<F>` where `F` dereferences to an
/// [`EndpointRateFixture`](crate::conformance::rate::EndpointRateFixture).
#[macro_export]
macro_rules! endpoint_rate_conformance {
    ($fixture:expr) => {
        $crate::__fixture_conformance_tests!(endpoint_rate, rate, $fixture;
            each_endpoint_has_its_own_limit_and_window,
            a_refused_endpoint_start_is_told_when_one_may_start,
            a_cancelled_endpoint_start_frees_only_its_endpoint,
            a_changed_limit_applies_from_the_next_start,
            concurrent_endpoint_starts_take_exactly_the_limit,
        );
    };
}

/// Every rule of [`conformance::event`](crate::conformance::event) as a `#[test]`, in a module `event_publisher`,
/// each on a runtime of its own. `$fixture`: an `Option<F>` where `F` dereferences to a fresh
/// [`EventPublisherFixture`](crate::conformance::event::EventPublisherFixture), evaluated on that runtime (so it
/// may spawn tasks and `.await`).
#[macro_export]
macro_rules! event_publisher_conformance {
    ($fixture:expr) => {
        $crate::__async_fixture_conformance_tests!(event_publisher, event, $fixture;
            publishing_without_subscribers_is_no_error,
            a_subscriber_receives_each_event_of_its_topic_once_in_order,
            subscribers_hear_only_their_topic,
            every_subscriber_of_a_topic_receives_every_event,
            a_subscriber_hears_only_what_is_published_after_it_subscribed,
            a_subscriber_that_falls_behind_is_told_how_many_it_missed,
            publishing_never_waits_for_a_subscriber_that_does_not_read,
            may_deliver_is_true_while_a_subscriber_listens,
        );
    };
}

/// Every rule of [`conformance::history`](crate::conformance::history) as a `#[test]`, in a module
/// `history_store`. `$fixture`: an `Option<F>` where `F` dereferences to a fresh [`crate::HistoryStore`] (see the
/// [module documentation](crate::conformance)).
#[macro_export]
macro_rules! history_store_conformance {
    ($fixture:expr) => {
        $crate::__conformance_tests!(history_store, history, $fixture;
            flushes_add_counters_and_raise_maxima_per_hour_and_subject,
            pruning_deletes_the_hours_before_its_instant,
        );
    };
}
