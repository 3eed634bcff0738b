//! The formats around an identity: the key announcement (link attributes), the key → identity
//! binding, and the identity list.

use sigil_crypto::{PublicKey, SignatureAlgorithm};
use sigil_identity::announce::{self, AnnounceError, KeyAnnouncement};
use sigil_identity::{Binding, BindingError, Identity, ListError, ListedKind};

fn ed(hex_key: &str) -> PublicKey {
    PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &hex::decode(hex_key).unwrap()).unwrap()
}

// RFC 8032 §7.1 TEST 1-3 public keys and the RFC 6979 A.2.5 P-256 key (vectors/identity.json).
fn test1() -> PublicKey {
    ed("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
}
fn test2() -> PublicKey {
    ed("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c")
}
fn test3() -> PublicKey {
    ed("fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025")
}
fn p256() -> PublicKey {
    PublicKey::from_bytes(
        SignatureAlgorithm::EcdsaP256,
        &hex::decode(
            "0460fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb6\
             7903fe1008b8bc99a41ae9e95628bc64f2f1b20c2d7e9f5177a3c294d4462299",
        )
        .unwrap(),
    )
    .unwrap()
}

/// Splits `;a=b;c="d"` into pairs, quotes removed (what sigil_coap::link yields).
fn attrs(text: &str) -> Vec<(&str, Option<&str>)> {
    text.split(';')
        .filter(|a| !a.is_empty())
        .map(|a| match a.split_once('=') {
            Some((n, v)) => (n, Some(v.trim_matches('"'))),
            None => (a, None),
        })
        .collect()
}

fn emit(a: &KeyAnnouncement<'_>, group: &[PublicKey]) -> String {
    let mut s = String::new();
    a.emit(&mut s, group).unwrap();
    s
}

#[test]
fn announcement_text_is_the_documented_one() {
    // RFC 8037 §A.2: the base64url form of the RFC 8032 TEST 1 key.
    let a = KeyAnnouncement::new(test1(), b"").unwrap();
    assert_eq!(
        emit(&a, &[]),
        ";key=\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\";alg=-8"
    );
    let a = KeyAnnouncement::new(test1(), b"kitchen").unwrap();
    assert_eq!(
        emit(&a, &[test2()]),
        ";key=\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\";alg=-8\
         ;grp=\"-8:PUAXw-hDiVqStwqnTRt-vJyYLM8uxJaMwM1V8Sr0Zgw\";io=\"a2l0Y2hlbg\""
    );
}

#[test]
fn announcement_round_trips() {
    for (key, group, other) in [
        (test1(), vec![], b"".to_vec()),
        (test1(), vec![], b"kitchen".to_vec()),
        (p256(), vec![], vec![0xff; 64]),
        (test1(), vec![test2(), test3(), p256()], vec![]),
        (p256(), vec![test3()], b"x".to_vec()),
    ] {
        let a = KeyAnnouncement::new(key, &other).unwrap();
        let text = format!("</m>;rt=\"sigil.env\";ct=18{}", emit(&a, &group));
        let pairs = attrs(text.split_once('>').unwrap().1);
        let back = KeyAnnouncement::parse(pairs).unwrap().unwrap();
        assert_eq!(back.key(), &key);
        assert_eq!(back.group().collect::<Vec<_>>(), group);
        assert_eq!(back.in_group(), !group.is_empty());
        assert_eq!(back.other_info(), &other[..]);
        // And emitted again, byte for byte.
        assert_eq!(
            emit(&back, &back.group().collect::<Vec<_>>()),
            emit(&a, &group)
        );
    }
}

#[test]
fn absent_announcement_and_default_algorithm() {
    assert_eq!(KeyAnnouncement::parse(attrs(";rt=x;ct=18")), Ok(None));
    // Without `alg` the key is Ed25519.
    let a = KeyAnnouncement::parse(attrs(";key=11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"))
        .unwrap()
        .unwrap();
    assert_eq!(a.key(), &test1());
}

#[test]
fn announcement_refusals() {
    let key = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
    let grp2 = "-8:PUAXw-hDiVqStwqnTRt-vJyYLM8uxJaMwM1V8Sr0Zgw";
    let cases: Vec<(String, AnnounceError)> = vec![
        (";alg=-8".into(), AnnounceError::MissingKey),
        (";io=eA".into(), AnnounceError::MissingKey),
        (
            format!(";key={key};key={key}"),
            AnnounceError::Repeated("key"),
        ),
        (
            format!(";key={key};alg=-8;alg=-8"),
            AnnounceError::Repeated("alg"),
        ),
        (";key;alg=-8".to_string(), AnnounceError::NoValue("key")),
        (format!(";key={key};io"), AnnounceError::NoValue("io")),
        (format!(";key={key};alg=-7"), AnnounceError::BadKey),
        (format!(";key={key}=;alg=-8"), AnnounceError::BadKey),
        (format!(";key={key}A;alg=-8"), AnnounceError::BadKey),
        (";key=AAAA;alg=-8".into(), AnnounceError::BadKey),
        (
            format!(";key={key};alg=-9"),
            AnnounceError::UnknownAlgorithm,
        ),
        (
            format!(";key={key};alg=EdDSA"),
            AnnounceError::UnknownAlgorithm,
        ),
        (format!(";key={key};grp="), AnnounceError::BadGroup),
        (format!(";key={key};grp=\" \""), AnnounceError::BadGroup),
        (
            format!(";key={key};grp=-7:{}", &grp2[3..]),
            AnnounceError::BadGroup,
        ),
        (
            format!(";key={key};grp={}", &grp2[3..]),
            AnnounceError::BadGroup,
        ),
        (
            format!(";key={key};grp=x:{}", &grp2[3..]),
            AnnounceError::BadGroup,
        ),
        (
            format!(";key={key};io=a2l0Y2hlbg=="),
            AnnounceError::BadOtherInfo,
        ),
        (
            format!(";key={key};io={}", "A".repeat(88)),
            AnnounceError::BadOtherInfo,
        ),
    ];
    for (text, want) in cases {
        assert_eq!(KeyAnnouncement::parse(attrs(&text)), Err(want), "{text}");
    }
    // 64 others make a group of 65: one too many.
    let many = vec![grp2; 64].join(" ");
    assert_eq!(
        KeyAnnouncement::parse([("key", Some(key)), ("grp", Some(many.as_str()))]),
        Err(AnnounceError::BadGroup)
    );
    // 64 bytes of other information are accepted, 65 refused.
    assert!(KeyAnnouncement::new(test1(), &[0; 64]).is_some());
    assert!(KeyAnnouncement::new(test1(), &[0; 65]).is_none());
}

#[test]
fn emit_into_refuses_a_small_buffer_at_every_length() {
    let a = KeyAnnouncement::new(p256(), b"kitchen").unwrap();
    let group = [test1(), test2()];
    let mut big = [0u8; 512];
    let n = a.emit_into(&mut big, group).unwrap();
    assert_eq!(std::str::from_utf8(&big[..n]).unwrap(), emit(&a, &group));
    for len in 0..n {
        let mut small = vec![0u8; len];
        assert_eq!(
            a.emit_into(&mut small, group),
            Err(AnnounceError::BufferTooSmall),
            "{len}"
        );
    }
}

#[test]
fn stored_group_words_parse_back() {
    let mut s = String::new();
    announce::write_group_word(&mut s, &p256()).unwrap();
    s.push(' ');
    announce::write_group_word(&mut s, &test2()).unwrap();
    assert_eq!(
        announce::parse_group(&s).unwrap().collect::<Vec<_>>(),
        vec![p256(), test2()]
    );
    assert_eq!(announce::parse_group("").unwrap().count(), 0);
    assert!(announce::parse_group("-8:AAAA").is_none());
}

// Identities from vectors/identity.json.
const TEST1_ID: &str = "06af05053d7deaac9aef246d4b188825";
const TEST1_KITCHEN_ID: &str = "314cc7bdf939c64edad617b8947d70e0";

fn identity_vector(name_contains: &str) -> Identity {
    let doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../vectors/identity.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let v = doc["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"].as_str().unwrap().contains(name_contains))
        .unwrap();
    Identity::parse(v["identity"].as_str().unwrap()).unwrap()
}

#[test]
fn binding_of_a_device_key() {
    let c = sigil_crypto::RustCrypto;
    let id = Identity::parse(TEST1_ID).unwrap();
    let kitchen = Identity::parse(TEST1_KITCHEN_ID).unwrap();
    let b = Binding::check(&c, &id, &test1(), &[], b"").unwrap();
    assert_eq!(
        b,
        Binding {
            device: id,
            group: None
        }
    );
    assert_eq!(
        Binding::check(&c, &kitchen, &test1(), &[], b"kitchen")
            .unwrap()
            .device,
        kitchen
    );
    // Another key, or other O, does not bind.
    assert_eq!(
        Binding::check(&c, &id, &test2(), &[], b""),
        Err(BindingError::Mismatch)
    );
    assert_eq!(
        Binding::check(&c, &id, &test1(), &[], b"kitchen"),
        Err(BindingError::Mismatch)
    );
    assert_eq!(b.authorized_by(|i| *i == id), Some(id));
    assert_eq!(b.authorized_by(|i| *i == kitchen), None);
}

#[test]
fn binding_of_a_kit_member() {
    let c = sigil_crypto::RustCrypto;
    let member = identity_vector("member TEST 1 key");
    let group = identity_vector("group of the three RFC 8032 keys");
    let b = Binding::check(&c, &member, &test1(), &[test3(), test2()], b"").unwrap();
    assert_eq!(b.group, Some(group));
    // The group identity does not depend on which member announces it.
    let other = Binding::of(&c, &test2(), &[test1(), test3()], b"").unwrap();
    assert_eq!(other.group, Some(group));
    assert_ne!(other.device, member);
    // Listed as a group: admitted through it; listed as neither: refused.
    assert_eq!(b.authorized_by(|i| *i == group), Some(group));
    assert_eq!(b.authorized_by(|i| *i == member), Some(member));
    assert_eq!(b.authorized_by(|_| false), None);
    // An outsider adding itself to the kit changes the group (so it is not on the list).
    let outsider = Binding::of(&c, &p256(), &[test1(), test2(), test3()], b"").unwrap();
    assert_ne!(outsider.group, Some(group));
    assert_eq!(outsider.authorized_by(|i| *i == group), None);
    // Its own key among the others is refused, as is a repeated one.
    assert_eq!(
        Binding::of(&c, &test1(), &[test1(), test2()], b""),
        Err(BindingError::BadGroup)
    );
    assert_eq!(
        Binding::of(&c, &test1(), &[test2(), test2()], b""),
        Err(BindingError::BadGroup)
    );
}

#[test]
fn list_forms_kinds_labels_and_comments() {
    let text = "# kit from box 7\n06AF-0505-3D7D-EAAC-9AEF-246D-4B18-8825 kitchen  sensor\n\n\
                314cc7bdf939c64edad617b8947d70e0 group kit 7 # scanned\n\
                06AF 0505 3D7D EAAC 9AEF 246D 4B18 8825\tdevice cafe\n\
                5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a psk-node shed\n";
    let v: Vec<_> = sigil_identity::list::entries(text)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(v.len(), 4);
    assert_eq!((v[3].kind, v[3].label), (ListedKind::PskNode, "shed"));
    assert_eq!(v[0].identity.to_string(), TEST1_ID);
    assert_eq!(
        (v[0].line, v[0].kind, v[0].label),
        (2, ListedKind::Device, "kitchen  sensor")
    );
    assert_eq!(
        (v[1].line, v[1].kind, v[1].label),
        (4, ListedKind::Group, "kit 7")
    );
    assert_eq!(v[2].identity.to_string(), TEST1_ID);
    assert_eq!(
        (v[2].line, v[2].kind, v[2].label),
        (5, ListedKind::Device, "cafe")
    );
}

#[test]
fn list_refuses_over_long_short_and_malformed_identities_with_the_line() {
    let good = "06af05053d7deaac9aef246d4b188825";
    fn first(text: &str) -> ListError<'_> {
        sigil_identity::list::entries(text)
            .find_map(Result::err)
            .unwrap_or_else(|| panic!("accepted: {text:?}"))
    }
    // Over-long identities used to be cut at 32 digits, the rest taken as a label.
    for (text, line) in [
        (format!("{good}\n\n{good}0\n"), 3),
        (format!("{good}\n{good}0 kitchen\n"), 2),
        (format!("{good}-1\n"), 1),
        (format!("{good}:ab\n"), 1),
        (
            "06AF-0505-3D7D-EAAC-9AEF-246D-4B18-8825-0000 box\n".to_string(),
            1,
        ),
        (
            "06AF 0505 3D7D EAAC 9AEF 246D 4B18 8825 0000 box\n".to_string(),
            1,
        ),
        (format!("# header\n{good} cafe\n"), 2),
    ] {
        let e = first(&text);
        assert!(matches!(e, ListError::TooLong { .. }), "{text:?}: {e:?}");
        assert_eq!(e.line(), line, "{text:?}");
        assert!(e.to_string().starts_with(&format!("line {line}:")), "{e}");
    }
    for (text, line) in [
        (format!("{good}x\n"), 1),
        ("hello\n".to_string(), 1),
        (format!("{good}\n06af05053d7deaac9aef246d4b18882g\n"), 2),
        (format!("{good}\n{good}/kitchen\n"), 2),
    ] {
        let e = first(&text);
        assert!(matches!(e, ListError::Malformed { .. }), "{text:?}: {e:?}");
        assert_eq!(e.line(), line);
    }
    let e = first("\n4B188825\n");
    assert_eq!(e, ListError::ShortLabel { line: 2, digits: 8 });
    assert!(e.to_string().contains("short labels"), "{e}");
    assert_eq!(
        first("4B18-8825 kitchen"),
        ListError::ShortLabel { line: 1, digits: 8 }
    );
}
