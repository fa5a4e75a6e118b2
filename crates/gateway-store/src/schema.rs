//! Diesel's view of the tables (the contract's tables plus later additive migrations; docs/architecture.md).

diesel::table! {
    gateway_heartbeats (agent_id) {
        agent_id -> Text,
        cluster_id -> Text,
        last_seen_at -> Timestamp,
        /// The rest is the shared liveness map's (migration `heartbeats_carry_receipts`): an agent is live while
        /// `received_minute` is not NULL; eviction clears these columns, never the three above.
        received_at -> Nullable<Timestamp>,
        /// The newest receipt's cluster (`cluster_id` is the last written heartbeat's).
        received_cluster_id -> Nullable<Text>,
        /// The minute of `received_at` (`receipt_minute`), written and cleared with it on both backends (on
        /// SQLite since migration `heartbeats_received_minute_written`; generated before).
        received_minute -> Nullable<BigInt>,
        inserted_minute -> BigInt,
        agent_type -> Nullable<Text>,
        capability_version -> Nullable<Text>,
        capabilities_updated_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    cron_jobs (id) {
        id -> BigInt,
        agent_id -> Text,
        schedule -> Nullable<Text>,
        next_fire_at -> Timestamp,
        payload -> Text,
        is_one_time -> Bool,
        claimed_by -> Nullable<Text>,
        claimed_until -> Nullable<Timestamp>,
        claim_token -> Nullable<BigInt>,
        idempotency_key -> Nullable<Text>,
        paused -> Bool,
        /// Generated: the bytes of `payload` (migration `agent_storage_bytes`); never written.
        payload_bytes -> BigInt,
        /// The IANA zone the schedule is read in (migration `cron_job_timezone`).
        timezone -> Text,
        /// Migration `cron_misfire_and_runs`.
        misfire_policy -> Text,
        max_lateness_ms -> Nullable<BigInt>,
    }
}

diesel::table! {
    webhook_configs (id) {
        id -> BigInt,
        source_identifier -> Text,
        event_type -> Text,
        agent_intent -> Text,
        target_session -> Text,
        target_url -> Text,
        secret -> Text,
        created_at -> Timestamp,
        previous_secret -> Nullable<Text>,
        secret_rotated_at -> Nullable<Timestamp>,
        inbound_secret -> Nullable<Text>,
        previous_inbound_secret -> Nullable<Text>,
        inbound_secret_rotated_at -> Nullable<Timestamp>,
        inbound_require_timestamp -> Bool,
        rate_limit_per_second -> Nullable<Integer>,
        enabled -> Bool,
        disabled_reason -> Nullable<Text>,
        consecutive_failures -> BigInt,
        last_success_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    webhook_inbound_receipts (id) {
        id -> BigInt,
        webhook_id -> BigInt,
        receipt_key -> Text,
        delivery_id -> BigInt,
        received_at -> Timestamp,
    }
}

diesel::table! {
    webhook_deliveries (id) {
        id -> BigInt,
        webhook_id -> BigInt,
        session_id -> Text,
        payload -> Text,
        target_url -> Text,
        signature -> Text,
        status -> Text,
        attempt_count -> Integer,
        last_attempted_at -> Nullable<Timestamp>,
        next_retry_at -> Nullable<Timestamp>,
        created_at -> Timestamp,
        error_detail -> Nullable<Text>,
        idempotency_key -> Nullable<Text>,
        claimed_until -> Nullable<Timestamp>,
        claim_token -> Nullable<BigInt>,
    }
}

diesel::table! {
    webhook_delivery_attempts (id) {
        id -> BigInt,
        delivery_id -> BigInt,
        attempt_number -> Integer,
        started_at -> Timestamp,
        duration_ms -> BigInt,
        status_code -> Nullable<Integer>,
        error_class -> Nullable<Text>,
        error_detail -> Nullable<Text>,
    }
}

diesel::table! {
    webhook_events (id) {
        id -> BigInt,
        event_type -> Text,
        source_identifier -> Nullable<Text>,
        request_digest -> Text,
        idempotency_key -> Nullable<Text>,
        delivery_ids -> Text,
        created_at -> Timestamp,
    }
}

diesel::joinable!(webhook_deliveries -> webhook_configs (webhook_id));
diesel::joinable!(webhook_inbound_receipts -> webhook_configs (webhook_id));
diesel::joinable!(webhook_delivery_attempts -> webhook_deliveries (delivery_id));
diesel::allow_tables_to_appear_in_same_query!(
    gateway_heartbeats,
    cron_jobs,
    webhook_configs,
    webhook_deliveries,
    webhook_delivery_attempts,
    webhook_inbound_receipts
);

diesel::table! {
    gateway_leader_epoch (id) {
        id -> BigInt,
        epoch -> BigInt,
    }
}

diesel::table! {
    agent_mailbox (seq) {
        seq -> BigInt,
        fire_id -> Text,
        agent_id -> Text,
        job_id -> BigInt,
        payload -> Text,
        scheduled_for -> Timestamp,
        fired_at -> Timestamp,
        received_at -> Nullable<Timestamp>,
        /// Generated: the bytes of `payload` (migration `agent_storage_bytes`); never written.
        payload_bytes -> BigInt,
        /// The leadership term the fire was published under (migration `mailbox_epoch`); 0 before it.
        epoch -> BigInt,
    }
}

diesel::table! {
    /// Instants the scheduler did not fire (migration `cron_misfire_and_runs`).
    cron_job_skips (seq) {
        seq -> BigInt,
        fire_id -> Text,
        job_id -> BigInt,
        agent_id -> Text,
        scheduled_for -> Timestamp,
        skipped_at -> Timestamp,
        outcome -> Text,
    }
}

diesel::table! {
    tool_calls (agent_id, tool_call_id) {
        agent_id -> Text,
        tool_call_id -> Text,
        tool_name -> Text,
        params_hash -> Text,
        result -> Text,
        created_at -> Timestamp,
        /// Generated: the bytes of `result` (migration `agent_storage_bytes`); never written.
        result_bytes -> BigInt,
    }
}

diesel::table! {
    agent_credentials (credential_id) {
        credential_id -> Text,
        agent_id -> Text,
        token_hash -> Text,
        created_at -> Timestamp,
        revoked_at -> Nullable<Timestamp>,
        expires_at -> Nullable<Timestamp>,
        last_used_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    gateway_history (hour_start, series, subject_id) {
        hour_start -> Timestamp,
        series -> Text,
        subject_id -> BigInt,
        value -> BigInt,
    }
}

diesel::table! {
    gateway_admin_token (id) {
        id -> BigInt,
        token_hash -> Text,
        set_at -> Timestamp,
    }
}
