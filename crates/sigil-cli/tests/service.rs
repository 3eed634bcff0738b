//! Running Sigil as a service, through the real binaries: SIGTERM and SIGINT stop `server`,
//! `sensor`, `diet` and `soak` cleanly (counters printed, WAL folded in, kept DTLS association
//! kept), `server --config`, host names, private database files, a bind failure that creates
//! nothing, `--retain`, `sigil backup` of a live database (stored DTLS sessions left out of
//! the copy), the lock on a state directory and the systemd unit.
#![cfg(unix)]

mod common;

use common::{
    first_line, free_port, plain_server_command, provisioned_sensor, sigil, wait_ready, Kill, SIGIL,
};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on the pid of a child this test started and has not yet waited for.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

/// Sends `sig` and waits for the process to end, at most 60 s.
fn stop(mut child: Child, sig: libc::c_int) -> Output {
    signal(&child, sig);
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process {} did not stop after the signal", child.id());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The server's counters: the JSON object it prints on stderr when it stops.
fn counters(out: &Output) -> serde_json::Value {
    let stderr = text(&out.stderr);
    let at = stderr
        .find("{\n")
        .unwrap_or_else(|| panic!("no counters in: {stderr}"));
    serde_json::from_str(stderr[at..].trim()).unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn server(db: &Path, port: u16, extra: &[&str]) -> Child {
    plain_server_command(db, port, extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn sensor(server: &str, state: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(SIGIL);
    c.args(["sensor", "--server", server, "--state"])
        .arg(state)
        .args(["--interval", "100ms"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn report(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", text(&out.stdout), text(&out.stderr)))
}

fn acknowledged(report: &serde_json::Value) -> Vec<u64> {
    report["acknowledged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

/// The sequence numbers stored for `ep`.
fn stored(db: &Path, ep: &str) -> Vec<u64> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut st = c
        .prepare("SELECT seq FROM readings WHERE ep = ?1 ORDER BY seq")
        .unwrap();
    let rows = st.query_map([ep], |r| r.get::<_, i64>(0)).unwrap();
    rows.map(|r| r.unwrap() as u64).collect()
}

/// Waits until `ep` has at least `n` readings stored.
fn wait_stored(db: &Path, ep: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while stored(db, ep).len() < n {
        assert!(Instant::now() < deadline, "{ep} never reached {n} readings");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn no_wal_left(db: &Path) {
    let side = |s: &str| PathBuf::from(format!("{}{s}", db.display()));
    let wal = side("-wal");
    assert!(
        !wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0,
        "{} left with data",
        wal.display()
    );
    assert!(!side("-shm").exists(), "-shm left behind");
}

/// SIGTERM (what service managers send) stops a sensor and then the server cleanly: each
/// exits 0 and prints its report or counters; every reading the sensor had acknowledged is
/// stored; the database is left without a WAL; the database is private (0600).
#[test]
fn sigterm_stops_sensor_and_server_cleanly_keeping_every_acknowledged_reading() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let st = dir.path().join("s");
    let id = provisioned_sensor(&db, &st);
    let port = free_port();
    let srv = server(&db, port, &[]);
    wait_ready(port);
    assert_eq!(mode(&db), 0o600, "the database holds secrets");
    let s = sensor(&format!("coap://127.0.0.1:{port}"), &st, &[])
        .spawn()
        .unwrap();
    wait_stored(&db, &id, 5);
    let out = stop(s, libc::SIGTERM);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let acked = acknowledged(&report(&out));
    assert!(acked.len() >= 5, "{acked:?}");

    let out = stop(srv, libc::SIGTERM);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("SIGTERM: stopping"));
    let c = counters(&out);
    assert!(
        c["publish.accepted"].as_u64().unwrap() >= acked.len() as u64,
        "{c}"
    );
    no_wal_left(&db);
    let have = stored(&db, &id);
    for seq in &acked {
        assert!(
            have.contains(seq),
            "acknowledged {seq} not stored: {have:?}"
        );
    }
}

/// SIGINT (Ctrl-C) too; and a server whose database others may read says so at start,
/// naming the file and the fix.
#[test]
fn sigint_stops_the_server_and_a_readable_database_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let port = free_port();
    let srv = server(&db, port, &[]);
    wait_ready(port);
    let out = stop(srv, libc::SIGINT);
    assert_eq!(out.status.code(), Some(0));
    assert!(!text(&out.stderr).contains("readable by group"));
    counters(&out);
    no_wal_left(&db);

    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let srv = server(&db, port, &[]);
    wait_ready(port);
    let out = stop(srv, libc::SIGTERM);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{} is readable by group or others (mode 644)",
            db.display()
        )) && stderr.contains(&format!("chmod 600 {}", db.display())),
        "{stderr}"
    );
}

/// A port in use: the error names the address and port, and no database file is made.
#[test]
fn a_port_in_use_is_named_and_creates_no_database() {
    let dir = tempfile::tempdir().unwrap();
    let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    for args in [
        vec![
            "--listen".to_string(),
            format!("127.0.0.1:{port}"),
            "--no-dtls".into(),
        ],
        vec![
            "--listen".to_string(),
            format!("127.0.0.1:{}", free_port()),
            "--dtls-listen".into(),
            format!("127.0.0.1:{port}"),
        ],
    ] {
        let db = dir.path().join("never.db");
        let out = Command::new(SIGIL)
            .arg("server")
            .args(&args)
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "cannot listen on 127.0.0.1:{port}: address already in use"
            )),
            "{stderr}"
        );
        assert!(!db.exists(), "a failed start created {}", db.display());
    }
}

/// `--config FILE`: every setting by its flag's name, host names for addresses, the command
/// line over the file, unknown keys refused by name before anything is created.
#[test]
fn a_config_file_sets_the_flags_and_the_command_line_overrides_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let (p1, p2) = (free_port(), free_port());
    let conf = dir.path().join("server.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = \"localhost:{p1}\"\nno-dtls = true\nretain = \"30d\"\nmax_ahead = 50\ndb = \"{}\"\n",
            db.display()
        ),
    )
    .unwrap();
    let start = |extra: &[&str]| {
        let mut c = Command::new(SIGIL)
            .args(["server", "--config"])
            .arg(&conf)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(c.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        (c, line)
    };
    let (c, line) = start(&[]);
    assert!(line.contains(&format!(":{p1}")), "{line}");
    assert!(db.exists(), "the file's db");
    let out = stop(c, libc::SIGTERM);
    assert_eq!(out.status.code(), Some(0));
    let (c, line) = start(&["--listen", &format!("127.0.0.1:{p2}")]);
    assert!(line.contains(&format!("coap://127.0.0.1:{p2}")), "{line}");
    stop(c, libc::SIGTERM);

    let other = dir.path().join("other.db");
    std::fs::write(
        &conf,
        format!(
            "db = \"{}\"\nlisten-address = \"127.0.0.1:1\"\n",
            other.display()
        ),
    )
    .unwrap();
    let out = Command::new(SIGIL)
        .args(["server", "--config"])
        .arg(&conf)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("unknown key 'listen-address'"), "{stderr}");
    assert!(!other.exists());

    let out = sigil(&[
        "server",
        "--no-dtls",
        "--listen",
        "no-such-host.invalid:5683",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("cannot resolve host 'no-such-host.invalid'"),
        "{}",
        text(&out.stderr)
    );
}

/// A coaps:// sensor stopped with SIGTERM keeps its DTLS association; started again it takes
/// it up without a handshake, and the server made one handshake in all.
#[test]
fn a_cleanly_stopped_dtls_sensor_resumes_its_session_without_a_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let st = dir.path().join("s");
    let id = provisioned_sensor(&db, &st);
    let psk = first_line(sigil(&["provision", "--db", dbs, "psk", &id]));
    let (port, dport) = (free_port(), free_port());
    let srv = Command::new(SIGIL)
        .args(["server", "--db", dbs])
        .args(["--listen", &format!("localhost:{port}")])
        .args(["--dtls-listen", &format!("127.0.0.1:{dport}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(port);
    let coaps = format!("coaps://localhost:{dport}");
    let dtls = ["--dtls", "psk", "--psk", &psk];
    let first = sensor(&coaps, &st, &dtls).spawn().unwrap();
    wait_stored(&db, &id, 3);
    let out = stop(first, libc::SIGTERM);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r1 = report(&out);
    assert_eq!(r1["dtls_handshakes"].as_u64(), Some(1), "{r1}");
    assert!(st.join("dtls-association").exists());
    assert_eq!(mode(&st), 0o700);
    assert_eq!(mode(&st.join("dtls-association")), 0o600);
    assert_eq!(mode(&st.join("key")), 0o600);

    let mut again = dtls.to_vec();
    again.extend(["--count", "5"]);
    let out = sensor(&coaps, &st, &again).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r2 = report(&out);
    assert_eq!(r2["dtls_restored"].as_u64(), Some(1), "{r2}");
    assert_eq!(r2["dtls_handshakes"].as_u64(), Some(0), "{r2}");
    assert_eq!(acknowledged(&r2).len(), 5, "{r2}");

    let out = stop(srv, libc::SIGTERM);
    let c = counters(&out);
    assert_eq!(c["dtls.handshake_completed"].as_u64(), Some(1), "{c}");
    let have = stored(&db, &id);
    for seq in acknowledged(&r1).iter().chain(&acknowledged(&r2)) {
        assert!(have.contains(seq), "{seq} not stored");
    }
}

/// Two processes on one state directory: the second is refused, naming the first's pid.
#[test]
fn a_state_directory_has_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let st = dir.path().join("s");
    provisioned_sensor(&db, &st);
    let port = free_port();
    let _srv = Kill(server(&db, port, &[]));
    wait_ready(port);
    let running = Kill(
        sensor(&format!("coap://127.0.0.1:{port}"), &st, &[])
            .spawn()
            .unwrap(),
    );
    let want = format!(
        "state directory {} is in use by another process (pid {})",
        st.display(),
        running.0.id()
    );
    // The lock is taken once the first is up: wait for its pid in the lock file.
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(st.join("lock"))
        .unwrap_or_default()
        .trim()
        != running.0.id().to_string()
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = sigil(&[
        "sensor",
        "--state",
        st.to_str().unwrap(),
        "--print-identity",
    ]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains(&want), "{}", text(&out.stderr));

    let dstate = dir.path().join("d");
    let node = |listen: u16| {
        Command::new(SIGIL)
            .args(["diet", "--state"])
            .arg(&dstate)
            .args(["--listen", &format!("127.0.0.1:{listen}")])
            .args([
                "--neighbour",
                &format!("127.0.0.1:{}={}", free_port(), "ab".repeat(16)),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut first = node(free_port());
    let mut line = String::new();
    BufReader::new(first.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let first = Kill(first);
    let out = node(free_port()).wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(&format!(
            "state directory {} is in use by another process (pid {})",
            dstate.display(),
            first.0.id()
        )),
        "{}",
        text(&out.stderr)
    );
}

/// `sigil diet` stops on SIGTERM with its summary (its refusal report), exit 0.
#[test]
fn sigterm_stops_a_diet_node_with_its_summary() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(SIGIL)
        .args(["diet", "--json", "--state"])
        .arg(dir.path().join("d"))
        .args(["--listen", &format!("localhost:{}", free_port())])
        .args([
            "--neighbour",
            &format!("localhost:{}={}", free_port(), "ab".repeat(16)),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stdout = BufReader::new(c.stdout.take().unwrap());
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"listening\""), "{line}");
    let out = stop(c, libc::SIGTERM);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let summary: serde_json::Value = serde_json::from_str(rest.lines().last().unwrap()).unwrap();
    assert_eq!(summary["event"], "summary", "{rest}");
    assert!(summary["refused"].is_object(), "{summary}");
    assert!(summary["hellos_sent"].as_u64().unwrap() >= 1, "{summary}");
}

/// `sigil soak` stops its attacks on SIGTERM and still prints its report.
#[test]
fn sigterm_ends_a_soak_early_with_its_report() {
    let c = Command::new(SIGIL)
        .args(["soak", "--json", "--duration", "600s", "--sensors", "2"])
        .args(["--dtls-sensors", "1", "--interval", "500ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(8));
    let out = stop(c, libc::SIGTERM);
    let r = report(&out);
    assert!(r["seconds"].as_f64().unwrap() < 300.0, "{r}");
    assert!(r["readings_acknowledged"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["acknowledged_but_missing"].as_u64(), Some(0), "{r}");
    assert_eq!(out.status.code(), Some(0), "{r}");
}

/// `--retain`: at start the server deletes readings older than the window, except each
/// sensor's latest; readings within the window stay.
#[test]
fn retain_prunes_old_readings_but_never_the_latest_or_the_recent() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let (sa, sb) = (dir.path().join("a"), dir.path().join("b"));
    let (a, b) = (provisioned_sensor(&db, &sa), provisioned_sensor(&db, &sb));
    let port = free_port();
    let srv = server(&db, port, &[]);
    wait_ready(port);
    let uri = format!("coap://127.0.0.1:{port}");
    for st in [&sa, &sb] {
        let out = sensor(&uri, st, &["--count", "6"]).output().unwrap();
        assert_eq!(acknowledged(&report(&out)).len(), 6);
    }
    stop(srv, libc::SIGTERM);
    let (sa_all, sb_all) = (stored(&db, &a), stored(&db, &b));
    {
        // a's readings all 40 days old, b's first three.
        let c = rusqlite::Connection::open(&db).unwrap();
        let old = "strftime('%s','now') - 40 * 86400";
        c.execute(
            &format!("UPDATE readings SET received_at = {old} WHERE ep = ?1"),
            [&a],
        )
        .unwrap();
        c.execute(
            &format!("UPDATE readings SET received_at = {old} WHERE ep = ?1 AND seq <= ?2"),
            rusqlite::params![&b, sb_all[2] as i64],
        )
        .unwrap();
    }
    let srv = server(&db, port, &["--retain", "30d"]);
    wait_ready(port);
    let c = counters(&stop(srv, libc::SIGTERM));
    assert_eq!(c["store.readings_pruned"].as_u64(), Some(5 + 3), "{c}");
    assert_eq!(
        stored(&db, &a),
        vec![*sa_all.last().unwrap()],
        "a's latest stays"
    );
    assert_eq!(stored(&db, &b), sb_all[3..].to_vec(), "b's recent stay");
}

/// `sigil backup` while a server stores readings: the copy is private, opens, passes
/// `integrity_check`, and holds every reading acknowledged before the backup began.
#[test]
fn a_backup_of_a_live_database_is_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let (sa, sb) = (dir.path().join("a"), dir.path().join("b"));
    let (a, b) = (provisioned_sensor(&db, &sa), provisioned_sensor(&db, &sb));
    let port = free_port();
    let _srv = Kill(server(&db, port, &[]));
    wait_ready(port);
    let uri = format!("coap://127.0.0.1:{port}");
    let out = sensor(&uri, &sa, &["--count", "20"]).output().unwrap();
    let acked = acknowledged(&report(&out));
    assert_eq!(acked.len(), 20);
    // Another sensor keeps the server writing while the backup runs.
    let writer = Kill(sensor(&uri, &sb, &[]).spawn().unwrap());
    wait_stored(&db, &b, 5);
    let copy = dir.path().join("backup.db");
    let out = sigil(&[
        "backup",
        "--db",
        db.to_str().unwrap(),
        "--out",
        copy.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("integrity check ok"));
    drop(writer);
    assert_eq!(mode(&copy), 0o600);
    let c = rusqlite::Connection::open(&copy).unwrap();
    let check: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(c);
    let have = stored(&copy, &a);
    assert_eq!(have, acked, "every acknowledged reading is in the copy");
    assert!(!stored(&copy, &b).is_empty());
    // The copy is a database a server opens.
    let p2 = free_port();
    let srv = server(&copy, p2, &[]);
    wait_ready(p2);
    assert_eq!(stop(srv, libc::SIGTERM).status.code(), Some(0));
    // It never overwrites.
    let out = sigil(&[
        "backup",
        "--db",
        db.to_str().unwrap(),
        "--out",
        copy.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("exists already"));
}

/// The number of stored DTLS sessions in `db`.
fn stored_sessions(db: &Path) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row("SELECT count(*) FROM dtls_sessions", [], |r| r.get(0))
        .unwrap()
}

/// `sigil backup` leaves stored DTLS sessions out of the copy (a server restored from it
/// would seal from write reservations the live server has used since: AEAD nonce reuse),
/// says so, and leaves the source's own; a server started on the copy restores none.
#[test]
fn a_backup_leaves_stored_dtls_sessions_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let st = dir.path().join("s");
    let id = first_line(sigil(&[
        "sensor",
        "--state",
        st.to_str().unwrap(),
        "--print-identity",
    ]));
    assert!(sigil(&["provision", "--db", dbs, "add", &id])
        .status
        .success());
    let psk = first_line(sigil(&["provision", "--db", dbs, "psk", &id]));
    let secure = |db: &Path, port: u16, dport: u16| {
        Command::new(SIGIL)
            .args(["server", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--dtls-listen", &format!("127.0.0.1:{dport}")])
            .arg("--db")
            .arg(db)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (port, dport) = (free_port(), free_port());
    let _srv = Kill(secure(&db, port, dport));
    wait_ready(port);
    let coaps = format!("coaps://127.0.0.1:{dport}");
    let _sensor = Kill(
        sensor(&coaps, &st, &["--dtls", "psk", "--psk", &psk])
            .spawn()
            .unwrap(),
    );
    wait_stored(&db, &id, 3);
    let deadline = Instant::now() + Duration::from_secs(30);
    while stored_sessions(&db) < 1 {
        assert!(Instant::now() < deadline, "the session was never stored");
        std::thread::sleep(Duration::from_millis(100));
    }
    let copy = dir.path().join("backup.db");
    let out = sigil(&["backup", "--db", dbs, "--out", copy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("integrity check ok; 1 stored DTLS sessions left out"),
        "{said}"
    );
    assert_eq!(
        stored_sessions(&copy),
        0,
        "the copy holds no stored session"
    );
    assert!(stored_sessions(&db) >= 1, "the source keeps its sessions");
    // A server on the restored copy restores no session (its client handshakes anew).
    let (p2, d2) = (free_port(), free_port());
    let srv = secure(&copy, p2, d2);
    wait_ready(p2);
    let out = stop(srv, libc::SIGTERM);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let c = counters(&out);
    assert_eq!(c["dtls.session_restored"].as_u64().unwrap_or(0), 0, "{c}");
    assert_eq!(stored_sessions(&copy), 0);
}

/// The systemd unit: hardened as documented, and `systemd-analyze verify` accepts it where
/// systemd is installed.
#[test]
fn the_systemd_unit_is_hardened_and_verifies() {
    let unit_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/sigil-server.service");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    let keys: Vec<(&str, &str)> = unit
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .collect();
    let has = |k: &str, v: &str| keys.iter().any(|(kk, vv)| *kk == k && *vv == v);
    for (k, v) in [
        ("DynamicUser", "yes"),
        ("StateDirectory", "sigil"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("NoNewPrivileges", "yes"),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("CapabilityBoundingSet", ""),
        ("SystemCallFilter", "@system-service"),
        ("MemoryDenyWriteExecute", "yes"),
        ("KillSignal", "SIGTERM"),
        ("UMask", "0077"),
    ] {
        assert!(has(k, v), "{k}={v} missing from {}", unit_path.display());
    }
    let exec = keys.iter().find(|(k, _)| *k == "ExecStart").unwrap().1;
    assert!(
        exec.starts_with("/usr/local/bin/sigil server --config "),
        "{exec}"
    );

    let Ok(status) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("systemd-analyze not installed: the unit was checked by its keys only");
        return;
    };
    assert!(status.status.success());
    // verify checks that ExecStart names an executable: this build's binary.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("sigil-server.service");
    std::fs::write(&local, unit.replace("/usr/local/bin/sigil", SIGIL)).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify"])
        .arg(&local)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("Unknown") && !stderr.contains("ignoring"),
        "systemd-analyze verify: {stderr}"
    );
}
