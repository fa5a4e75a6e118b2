//! Rules every [`AgentCredentialStore`] must keep: a credential reads back exactly as issued, by id and in its
//! agent's list; revoked ones are found by when they were revoked; ids are unique; revocation is once, by the
//! owning agent only, and keeps the row. Instants carry milliseconds, which every backend keeps exactly.

use time::{Duration, OffsetDateTime};

use crate::{AgentCredentialStore, AgentId, CredentialId, CredentialRecord, TokenHash};

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("a valid agent id")
}

/// Credential `n`: ids in the order of `n`, a hash of its own.
fn id(n: u32) -> CredentialId {
    CredentialId::parse(&format!("{n:024x}")).expect("24 hex digits")
}

fn credential(n: u32, agent_id: &str, created_at: OffsetDateTime) -> CredentialRecord {
    CredentialRecord {
        credential_id: id(n),
        agent_id: agent(agent_id),
        token_hash: TokenHash::of(format!("token-{n}")),
        created_at,
        revoked_at: None,
        expires_at: None,
        last_used_at: None,
    }
}

/// A credential reads back whole by its id, unrevoked (whatever `revoked_at` the insert carried), and an id never
/// stored reads as `None`. Expects an empty store.
pub fn a_credential_reads_back_as_issued_and_unknown_ids_read_as_none(
    store: &dyn AgentCredentialStore,
    at: OffsetDateTime,
) {
    let issued = credential(1, "agent-a", at + Duration::milliseconds(250));
    store.insert_credential(&CredentialRecord { revoked_at: Some(at), ..issued.clone() }).expect("insert");
    assert_eq!(store.credential(&issued.credential_id).expect("read"), Some(issued.clone()));
    assert_eq!(store.credential(&id(2)).expect("read"), None);
    assert_eq!(store.agent_credentials(&agent("agent-a"), None, 10).expect("list"), vec![issued]);
    assert_eq!(store.agent_credentials(&agent("agent-b"), None, 10).expect("list"), vec![]);
}

/// A second insert under a stored id is a conflict and changes nothing, even for another agent. Expects an empty
/// store.
pub fn a_credential_id_is_unique(store: &dyn AgentCredentialStore, at: OffsetDateTime) {
    let first = credential(7, "agent-a", at);
    store.insert_credential(&first).expect("insert");
    let again = CredentialRecord { token_hash: TokenHash::of("other"), ..credential(7, "agent-b", at) };
    let refused = store.insert_credential(&again);
    assert!(matches!(refused, Err(crate::StoreError::Conflict(_))), "{refused:?}");
    assert_eq!(store.credential(&first.credential_id).expect("read"), Some(first));
    assert_eq!(store.agent_credentials(&agent("agent-b"), None, 10).expect("list"), vec![]);
}

/// The revocation poll answers the credentials revoked at or after its instant, each once (`revoked_at` equal to
/// it included), and none that are unrevoked or were revoked before it; 600 credentials, 100 of them revoked at
/// instants a millisecond apart. Expects an empty store.
pub fn the_revocation_poll_finds_the_credentials_revoked_since_its_instant(
    store: &dyn AgentCredentialStore,
    at: OffsetDateTime,
) {
    assert_eq!(store.revoked_since(at).expect("poll an empty store"), vec![]);
    let stored: Vec<CredentialRecord> = (0..600)
        .map(|n| credential(2 * n, &format!("agent-{}", n % 7), at + Duration::milliseconds(n.into())))
        .collect();
    for row in &stored {
        store.insert_credential(row).expect("insert");
    }
    let revoked: Vec<(OffsetDateTime, CredentialId)> = stored
        .iter()
        .step_by(6)
        .enumerate()
        .map(|(n, row)| {
            let revoked_at = at + Duration::milliseconds(i64::try_from(n).expect("small"));
            store.revoke_credential(&row.agent_id, &row.credential_id, revoked_at).expect("revoke");
            (revoked_at, row.credential_id.clone())
        })
        .collect();
    assert_eq!(store.revoked_since(at - Duration::days(1)).expect("poll").len(), 100);
    let since = at + Duration::milliseconds(40);
    let mut found = store.revoked_since(since).expect("poll");
    found.sort();
    let mut expected: Vec<CredentialId> =
        revoked.iter().filter(|(revoked_at, _)| *revoked_at >= since).map(|(_, id)| id.clone()).collect();
    expected.sort();
    assert_eq!((found.len(), &found), (60, &expected));
    assert_eq!(store.revoked_since(at + Duration::milliseconds(100)).expect("poll"), vec![]);
}

/// Revoking sets `revoked_at` once: a second revocation keeps the first instant. A credential is revoked only
/// through its own agent: through another it is `None` and stays as it was, as is an unknown id. The row stays,
/// listed with its `revoked_at`, and the revocation poll finds it from its first instant on. Expects an empty store.
pub fn revocation_is_once_by_the_owning_agent_and_keeps_the_row(store: &dyn AgentCredentialStore, at: OffsetDateTime) {
    let kept = credential(1, "agent-a", at);
    let revoked = credential(2, "agent-a", at);
    store.insert_credential(&kept).expect("insert");
    store.insert_credential(&revoked).expect("insert");

    let by_other = store.revoke_credential(&agent("agent-b"), &revoked.credential_id, at).expect("revoke");
    assert_eq!(by_other, None, "another agent's credential is not found");
    assert_eq!(store.credential(&revoked.credential_id).expect("read"), Some(revoked.clone()));
    assert_eq!(store.revoke_credential(&agent("agent-a"), &id(3), at).expect("revoke"), None);

    let first = at + Duration::milliseconds(1_500);
    let expected = CredentialRecord { revoked_at: Some(first), ..revoked.clone() };
    let answered = store.revoke_credential(&agent("agent-a"), &revoked.credential_id, first).expect("revoke");
    assert_eq!(answered, Some(expected.clone()));
    let second = store
        .revoke_credential(&agent("agent-a"), &revoked.credential_id, first + Duration::seconds(60))
        .expect("revoke again");
    assert_eq!(second, Some(expected.clone()), "the first revocation's instant stays");
    assert_eq!(store.credential(&revoked.credential_id).expect("read"), Some(expected.clone()));
    assert_eq!(store.credential(&kept.credential_id).expect("read"), Some(kept.clone()), "the other is untouched");
    assert_eq!(
        store.agent_credentials(&agent("agent-a"), None, 10).expect("list"),
        vec![kept.clone(), expected.clone()]
    );
    assert_eq!(store.revoked_since(first).expect("poll"), vec![revoked.credential_id.clone()]);
    assert_eq!(store.revoked_since(first + Duration::milliseconds(1)).expect("poll"), vec![]);
    assert_eq!(store.credential(&revoked.credential_id).expect("read"), Some(expected));
}

/// An agent's credentials list by credential id, in pages after a cursor, without other agents'. Expects an
/// empty store.
pub fn an_agents_credentials_list_by_id_in_pages(store: &dyn AgentCredentialStore, at: OffsetDateTime) {
    // Inserted out of id order, interleaved with another agent's.
    let mut mine = Vec::new();
    for n in [5, 1, 9, 3, 7] {
        let row = credential(n, "agent-a", at + Duration::milliseconds(n.into()));
        store.insert_credential(&row).expect("insert");
        store.insert_credential(&credential(n + 100, "agent-b", at)).expect("insert");
        mine.push(row);
    }
    mine.sort_by(|a, b| a.credential_id.cmp(&b.credential_id));
    let a = agent("agent-a");
    assert_eq!(store.agent_credentials(&a, None, 2).expect("list"), mine[..2]);
    assert_eq!(store.agent_credentials(&a, Some(&mine[1].credential_id), 2).expect("list"), mine[2..4]);
    assert_eq!(store.agent_credentials(&a, Some(&mine[3].credential_id), 2).expect("list"), mine[4..]);
    assert_eq!(store.agent_credentials(&a, Some(&mine[4].credential_id), 2).expect("list"), vec![]);
    assert_eq!(store.agent_credentials(&a, Some(&id(0)), 10).expect("list"), mine, "a cursor need not be stored");
}

/// A credential's expiry reads back exactly (to the millisecond), by id and in its agent's list, beside one that
/// never expires; revoking an expiring credential keeps its expiry. Expects an empty store.
pub fn an_expiry_reads_back_by_id_and_in_the_list_and_survives_revocation(
    store: &dyn AgentCredentialStore,
    at: OffsetDateTime,
) {
    let expiring = CredentialRecord {
        expires_at: Some(at + Duration::seconds(3_600) + Duration::milliseconds(125)),
        ..credential(1, "agent-a", at)
    };
    let lasting = credential(2, "agent-a", at);
    store.insert_credential(&expiring).expect("insert");
    store.insert_credential(&lasting).expect("insert");
    assert_eq!(store.credential(&expiring.credential_id).expect("read"), Some(expiring.clone()));
    assert_eq!(store.credential(&lasting.credential_id).expect("read"), Some(lasting.clone()));
    assert_eq!(
        store.agent_credentials(&agent("agent-a"), None, 10).expect("list"),
        vec![expiring.clone(), lasting.clone()]
    );
    let revoked_at = at + Duration::seconds(10);
    let revoked = store.revoke_credential(&agent("agent-a"), &expiring.credential_id, revoked_at).expect("revoke");
    assert_eq!(revoked, Some(CredentialRecord { revoked_at: Some(revoked_at), ..expiring.clone() }));
    assert!(expiring.is_expired(at + Duration::seconds(3_601)) && !expiring.is_expired(at));
    assert!(!lasting.is_expired(at + Duration::days(36_500)));
}

/// Recorded uses set `last_used_at` to the later of the stored and the given instant: an older report (another
/// instance's, late) never moves it back; unknown ids are ignored; a revoked credential's uses are kept like any;
/// the instant reads back by id and in the agent's list. One call records many credentials, at several instants
/// (1,500 of them here, more than one statement's worth of ids on any backend). Expects an empty store.
pub fn recorded_uses_only_move_last_use_forwards(store: &dyn AgentCredentialStore, at: OffsetDateTime) {
    let first = credential(1, "agent-a", at);
    let second = credential(2, "agent-a", at);
    let unused = credential(3, "agent-b", at);
    for row in [&first, &second, &unused] {
        store.insert_credential(&CredentialRecord { last_used_at: Some(at), ..row.clone() }).expect("insert");
    }
    assert_eq!(store.credential(&first.credential_id).expect("read"), Some(first.clone()), "an insert is unused");
    store.record_credential_uses(&[]).expect("nothing to record");

    let minute = |n: i64| at + Duration::minutes(n);
    store
        .record_credential_uses(&[
            (first.credential_id.clone(), minute(2)),
            (second.credential_id.clone(), minute(1)),
            (id(99), minute(5)),
        ])
        .expect("record");
    store.revoke_credential(&agent("agent-a"), &second.credential_id, minute(3)).expect("revoke");
    store
        .record_credential_uses(&[(first.credential_id.clone(), minute(1)), (second.credential_id.clone(), minute(4))])
        .expect("record an older and a newer use");
    let listed = store.agent_credentials(&agent("agent-a"), None, 10).expect("list");
    let last_uses: Vec<Option<OffsetDateTime>> = listed.iter().map(|row| row.last_used_at).collect();
    assert_eq!(last_uses, vec![Some(minute(2)), Some(minute(4))], "{listed:?}");
    assert_eq!(listed[1].revoked_at, Some(minute(3)));
    assert_eq!(
        store.credential(&first.credential_id).expect("read").map(|row| row.last_used_at),
        Some(Some(minute(2)))
    );
    assert_eq!(store.credential(&unused.credential_id).expect("read"), Some(unused.clone()), "untouched");
    assert_eq!(store.credential(&id(99)).expect("read"), None, "a use creates nothing");

    let many: Vec<CredentialRecord> = (100..1_600).map(|n| credential(n, "agent-c", at)).collect();
    for row in &many {
        store.insert_credential(row).expect("insert");
    }
    let uses: Vec<(CredentialId, OffsetDateTime)> = many
        .iter()
        .enumerate()
        .map(|(n, row)| (row.credential_id.clone(), minute(10 + i64::from(n % 2 == 0))))
        .collect();
    store.record_credential_uses(&uses).expect("record many");
    let listed = store.agent_credentials(&agent("agent-c"), None, 2_000).expect("list");
    assert_eq!(listed.len(), 1_500);
    for (n, row) in listed.iter().enumerate() {
        assert_eq!(row.last_used_at, Some(minute(10 + i64::from(n % 2 == 0))), "{}", row.credential_id);
    }
}

/// The list across agents holds every agent's credentials, revoked ones included, by credential id, in pages after
/// a cursor (which need not be stored). Expects an empty store.
pub fn all_credentials_list_across_agents_by_id_in_pages(store: &dyn AgentCredentialStore, at: OffsetDateTime) {
    assert_eq!(store.all_credentials(None, 10).expect("list an empty store"), vec![]);
    let mut stored = Vec::new();
    for n in [5, 1, 9, 3, 7, 2] {
        let row = credential(n, &format!("agent-{}", n % 3), at + Duration::milliseconds(n.into()));
        store.insert_credential(&row).expect("insert");
        stored.push(row);
    }
    let revoked_at = at + Duration::seconds(1);
    let revoked = store.revoke_credential(&stored[0].agent_id, &stored[0].credential_id, revoked_at).expect("revoke");
    stored[0] = revoked.expect("revoked");
    stored.sort_by(|a, b| a.credential_id.cmp(&b.credential_id));
    assert_eq!(store.all_credentials(None, 4).expect("list"), stored[..4]);
    assert_eq!(store.all_credentials(Some(&stored[3].credential_id), 4).expect("list"), stored[4..]);
    assert_eq!(store.all_credentials(Some(&stored[5].credential_id), 4).expect("list"), vec![]);
    assert_eq!(store.all_credentials(Some(&id(4)), 10).expect("list"), stored[3..], "a cursor need not be stored");
}
