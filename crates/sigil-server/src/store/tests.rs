use super::*;

/// Schema version 3: a registration written by version 2 is taken as signed (Sigil
/// devices always signed their registration), and new rows keep the owner they are given.
#[test]
fn registrations_from_before_ownership_are_signed() {
    let conn = Connection::open_in_memory().unwrap();
    for sql in &MIGRATIONS[..2] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", 2).unwrap();
    // RFC 8032 §7.1 test 1's public key.
    let pk: [u8; 32] = [
        0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64, 0x07,
        0x3a, 0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68, 0xf7, 0x07,
        0x51, 0x1a,
    ];
    let ep = "00112233445566778899aabbccddeeff";
    conn.execute(
        "INSERT INTO registrations (ep, authorized_by, alg, public_key, lifetime, links,
             registered_at, updated_at, expires_at)
         VALUES (?1, ?1, -8, ?2, 60, '</m>', 1, 1, 61)",
        params![ep, &pk[..]],
    )
    .unwrap();
    let mut store = Store::init(conn).unwrap();
    assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len() as i64);
    let mut reg = store.registrations().unwrap().remove(0);
    assert_eq!(reg.owner, Ownership::Signed);
    reg.owner = Ownership::Session;
    store
        .transaction(|b| b.upsert_registration(&reg).map(|_| ()))
        .unwrap();
    assert_eq!(store.registrations().unwrap()[0].owner, Ownership::Session);
    store
        .transaction(|b| b.update_registration(reg.id, 60, None, 2, 62, Ownership::Open))
        .unwrap();
    assert_eq!(store.registrations().unwrap()[0].owner, Ownership::Open);
}

/// Schema version 6 rebuilds `registrations` so a PSK-only node's entry can have no key:
/// rows, ids and the AUTOINCREMENT counter survive (a removed registration's id is still
/// never reused), stored readings are taken as signed, and a keyless row must be owned by
/// a session.
#[test]
fn version_6_keeps_registrations_and_their_ids() {
    let conn = Connection::open_in_memory().unwrap();
    for sql in &MIGRATIONS[..5] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", 5).unwrap();
    let pk = [0xd7u8; 32];
    for ep in [
        "00112233445566778899aabbccddeeff",
        "ffeeddccbbaa99887766554433221100",
    ] {
        conn.execute(
            "INSERT INTO registrations (ep, authorized_by, alg, public_key, lifetime, links,
                 registered_at, updated_at, expires_at)
             VALUES (?1, ?1, -8, ?2, 60, '</m>', 1, 1, 61)",
            params![ep, &pk[..]],
        )
        .unwrap();
    }
    // The second (id 2) is removed: id 2 must never come back.
    conn.execute("DELETE FROM registrations WHERE id = 2", [])
        .unwrap();
    conn.execute(
        "INSERT INTO readings (registration, ep, topic, seq, content_format, raw, decoded,
             verified, received_at)
         VALUES (1, '00112233445566778899aabbccddeeff', 'ps/1/m', 1, 18, x'00', '[]', 1, 1)",
        [],
    )
    .unwrap();
    let mut store = Store::init(conn).unwrap();
    assert_eq!(store.schema_version().unwrap(), 7);
    let regs = store.registrations().unwrap();
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].id, 1);
    assert!(regs[0].key.is_some());
    let ep = Identity::parse("00112233445566778899aabbccddeeff").unwrap();
    let stored = store
        .transaction(|b| b.latest_reading(&ep))
        .unwrap()
        .unwrap();
    assert_eq!(stored.protection, Protection::Signed);
    let mut keyless = regs[0].clone();
    keyless.ep = Identity::from_bytes([9; 16]);
    keyless.key = None;
    keyless.owner = Ownership::Session;
    let id = store
        .transaction(|b| b.upsert_registration(&keyless))
        .unwrap();
    assert_eq!(id, 3, "ids keep counting past the removed one");
    assert_eq!(store.registrations().unwrap()[1].key, None);
    // A keyless row that is not owned by a session is refused by the schema.
    keyless.ep = Identity::from_bytes([8; 16]);
    keyless.owner = Ownership::Signed;
    assert!(store
        .transaction(|b| b.upsert_registration(&keyless))
        .is_err());
}
