use super::*;

#[test]
fn lookup_targets_resolve_to_their_path() {
    assert_eq!(target_path("coap://127.0.0.1:5683/ps/3/m"), "/ps/3/m");
    assert_eq!(target_path("coaps://[::1]:5684/ps/3/m"), "/ps/3/m");
    assert_eq!(target_path("/ps/3/m"), "/ps/3/m");
    assert_eq!(target_path("coap://host"), "/");
    let a = parse_lookup("<coap://h:1/ps/7/m>;ep=\"x\";ct=18").unwrap();
    assert_eq!(a[0].href, "/ps/7/m");
}

#[test]
fn a_topic_the_server_cannot_serve_now_is_not_readable_with_the_fix() {
    let t = Some(std::time::Duration::from_secs(3));
    // The answers `sigil server` gives (service.rs) when its database is locked or full.
    let busy: anyhow::Error = Refused::new(
        Code::SERVICE_UNAVAILABLE,
        b"database busy; nothing was stored",
        "/ps/1/m",
    )
    .into();
    let why = topic_failure(&busy, None, "ep", t);
    assert!(
        why.starts_with("database busy (5.03 database busy"),
        "{why}"
    );
    assert!(why.ends_with("try again"), "{why}");
    let full: anyhow::Error = Refused::new(
        Code::SERVICE_UNAVAILABLE,
        b"storage full; nothing was stored",
        "/ps/1/m",
    )
    .into();
    assert!(topic_failure(&full, None, "ep", t).starts_with("server storage full (5.03"));
    let failed: anyhow::Error =
        Refused::new(Code::INTERNAL_SERVER_ERROR, b"storage failure", "/ps/1/m").into();
    assert!(
        topic_failure(&failed, None, "ep", t).starts_with("server error (5.00 storage failure)")
    );
    // The client's own give-up (coap.rs) for one request.
    let silent = crate::transport::no_answer(
        "127.0.0.1:5683".parse().unwrap(),
        false,
        std::time::Duration::from_secs(3),
    );
    let why = topic_failure(&silent, None, "ep", t);
    assert!(
        why.starts_with("no answer for this topic within 3s"),
        "{why}"
    );
}
