//! The soak's CryptoDiet part: `sigil diet` nodes A and C with a recording relay between
//! them, the replayer of C's recorded datagrams from many addresses, and the newcomer D.

use super::*;

/// A free UDP port on 127.0.0.1 (bound and released).
fn free_port() -> Result<u16> {
    Ok(std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// How many of C's first datagrams to A are recorded for the replay (its hello, then
/// messages).
const RECORDED_DIET_DATAGRAMS: usize = 6;

/// The CryptoDiet part: `sigil diet` nodes A and C (C's datagrams to A pass a relay here,
/// which records them), a replayer of C's recorded hello and messages at A from many
/// addresses, and a newcomer D that A has configured and that starts during the attacks.
pub(super) struct DietRig {
    pub(super) a: tokio::process::Child,
    pub(super) c: tokio::process::Child,
    pub(super) d: Option<tokio::process::Child>,
    pub(super) a_addr: SocketAddr,
    /// Where A sees C: the relay's address.
    pub(super) c_seen_at: SocketAddr,
    pub(super) c_id: String,
    pub(super) d_id: String,
    pub(super) d_args: Vec<String>,
    /// A's JSON events, with when they came.
    pub(super) events: Arc<Mutex<Vec<(Instant, serde_json::Value)>>>,
    pub(super) recorded: Arc<Mutex<Vec<Vec<u8>>>>,
    pub(super) relay: tokio::task::JoinHandle<()>,
    pub(super) d_started: Option<Instant>,
    /// When A and C were started.
    pub(super) started: Instant,
}

impl DietRig {
    pub(super) async fn start(dir: &std::path::Path) -> Result<Self> {
        let exe = std::env::current_exe().context("the sigil binary")?;
        let state = |n: &str| dir.join(format!("diet-{n}"));
        let identity = |n: &str| -> Result<String> {
            let out = std::process::Command::new(&exe)
                .args(["diet", "--print-identity", "--state"])
                .arg(state(n))
                .output()?;
            anyhow::ensure!(
                out.status.success(),
                "sigil diet --print-identity: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        };
        let started = Instant::now();
        let (a_id, c_id, d_id) = (identity("a")?, identity("c")?, identity("d")?);
        // A trusts C and D by identity list, so their hellos are taken from any address:
        // the case where a replay of C's recorded hello from elsewhere could make a slot.
        let label = |id: &str| -> Result<String> {
            Ok(sigil_identity::Identity::parse(id)
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .label()
                .to_string())
        };
        let trust = dir.join("diet-trust.txt");
        std::fs::write(
            &trust,
            format!(
                "{} device soak diet node C\n{} device soak diet node D\n",
                label(&c_id)?,
                label(&d_id)?
            ),
        )?;
        let (pa, pc, pd) = (free_port()?, free_port()?, free_port()?);
        let a_addr: SocketAddr = format!("127.0.0.1:{pa}").parse()?;
        let c_addr: SocketAddr = format!("127.0.0.1:{pc}").parse()?;
        // The relay: X is C as A sees it, Y is A as C sees it.
        let x = Arc::new(UdpSocket::bind("127.0.9.1:0").await?);
        let y = Arc::new(UdpSocket::bind("127.0.9.2:0").await?);
        let (xa, ya) = (x.local_addr()?, y.local_addr()?);
        let recorded: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let rec = recorded.clone();
        let relay = tokio::spawn(async move {
            let (mut bx, mut by) = (vec![0u8; 2048], vec![0u8; 2048]);
            loop {
                tokio::select! {
                    r = y.recv_from(&mut by) => {
                        let Ok((n, _)) = r else { break };
                        if let Ok(mut rec) = rec.lock() {
                            if rec.len() < RECORDED_DIET_DATAGRAMS {
                                rec.push(by[..n].to_vec());
                            }
                        }
                        let _ = x.send_to(&by[..n], a_addr).await;
                    }
                    r = x.recv_from(&mut bx) => {
                        let Ok((n, _)) = r else { break };
                        let _ = y.send_to(&bx[..n], c_addr).await;
                    }
                }
            }
        });
        let spawn = |args: Vec<String>| -> Result<tokio::process::Child> {
            Ok(tokio::process::Command::new(&exe)
                .args(args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()?)
        };
        let s = |p: std::path::PathBuf| p.display().to_string();
        let mut a = spawn(vec![
            "diet".into(),
            "--json".into(),
            "--state".into(),
            s(state("a")),
            "--listen".into(),
            a_addr.to_string(),
            "--neighbour".into(),
            format!("{xa}={c_id}"),
            "--neighbour".into(),
            format!("127.0.0.1:{pd}={d_id}"),
            "--trust".into(),
            s(trust.clone()),
            "--interval".into(),
            "1s".into(),
        ])?;
        let c = spawn(vec![
            "diet".into(),
            "--json".into(),
            "--state".into(),
            s(state("c")),
            "--listen".into(),
            c_addr.to_string(),
            "--neighbour".into(),
            format!("{ya}={a_id}"),
            "--interval".into(),
            "1s".into(),
        ])?;
        let d_args = vec![
            "diet".into(),
            "--json".into(),
            "--state".into(),
            s(state("d")),
            "--listen".into(),
            format!("127.0.0.1:{pd}"),
            "--neighbour".into(),
            format!("{a_addr}={a_id}"),
            "--interval".into(),
            "1s".into(),
        ];
        let events: Arc<Mutex<Vec<(Instant, serde_json::Value)>>> = Arc::default();
        let stdout = a.stdout.take().context("diet node stdout")?;
        let ev = events.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    if let Ok(mut e) = ev.lock() {
                        e.push((Instant::now(), v));
                    }
                }
            }
        });
        Ok(Self {
            a,
            c,
            d: None,
            a_addr,
            c_seen_at: xa,
            c_id,
            d_id,
            d_args,
            events,
            recorded,
            relay,
            d_started: None,
            started,
        })
    }

    /// Messages A verified from C, through the relay: what a replay will try again.
    pub(super) fn c_messages(&self) -> usize {
        self.count(|v| v["event"] == "message" && v["identity"] == self.c_id.as_str())
    }

    pub(super) fn count(&self, mut f: impl FnMut(&serde_json::Value) -> bool) -> usize {
        self.events
            .lock()
            .map(|e| e.iter().filter(|(_, v)| f(v)).count())
            .unwrap_or(0)
    }

    pub(super) fn start_newcomer(&mut self) -> Result<()> {
        self.d = Some(
            tokio::process::Command::new(std::env::current_exe()?)
                .args(&self.d_args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()?,
        );
        self.d_started = Some(Instant::now());
        Ok(())
    }

    /// The newcomer's first message verified by A, from its start.
    pub(super) fn newcomer_served(&self) -> (Option<Duration>, usize) {
        let Some(t0) = self.d_started else {
            return (None, 0);
        };
        let e = self.events.lock().map(|e| e.clone()).unwrap_or_default();
        let mine: Vec<_> = e
            .iter()
            .filter(|(_, v)| v["event"] == "message" && v["identity"] == self.d_id.as_str())
            .collect();
        (
            mine.first().map(|(t, _)| t.saturating_duration_since(t0)),
            mine.len(),
        )
    }

    /// When A had established C at C's address and verified C's first message there, from
    /// the nodes' start.
    pub(super) fn c_served(&self) -> Option<Duration> {
        let at = self.c_seen_at.to_string();
        let e = self.events.lock().ok()?;
        let first = |what: &str, field: &str| {
            e.iter()
                .find(|(_, v)| {
                    v["event"] == what
                        && v["identity"] == self.c_id.as_str()
                        && v[field] == at.as_str()
                })
                .map(|(t, _)| *t)
        };
        let served = first("established", "peer")?.max(first("message", "from")?);
        Some(served.saturating_duration_since(self.started))
    }

    /// What A accepted of C's that C did not send it: messages, new slots and moves of C at
    /// any address other than C's, and messages of C taken twice (each of C's messages
    /// carries its own number, so a second copy is a replay, whichever address it came
    /// from, C's own included).
    pub(super) fn replays_accepted(&self) -> ReplaysAccepted {
        let at = self.c_seen_at.to_string();
        let elsewhere = |v: &serde_json::Value, what: &str, field: &str| {
            v["event"] == what && v["identity"] == self.c_id.as_str() && v[field] != at.as_str()
        };
        let mut texts = std::collections::HashSet::new();
        let twice = self.count(|v| {
            v["event"] == "message"
                && v["identity"] == self.c_id.as_str()
                && !texts.insert(v["text"].to_string())
        });
        ReplaysAccepted {
            messages: self.count(|v| elsewhere(v, "message", "from")),
            slots: self.count(|v| elsewhere(v, "established", "peer")),
            moves: self.count(|v| elsewhere(v, "moved", "peer")),
            twice,
        }
    }

    /// What A refused, by reason: from its summary when it printed one at the end, else
    /// from its refusal lines (each stands for `count` refusals).
    pub(super) fn refusals_of(
        events: &Mutex<Vec<(Instant, serde_json::Value)>>,
        summary: Option<&serde_json::Value>,
    ) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        if let Some(r) = summary.and_then(|s| s["refused"].as_object()) {
            for (k, v) in r {
                if let Some(n) = v.as_u64().filter(|n| *n > 0) {
                    out.insert(format!("node A refused {k}"), n);
                }
            }
            return out;
        }
        if let Ok(e) = events.lock() {
            for (_, v) in e.iter().filter(|(_, v)| v["event"] == "refused") {
                let reason = v["reason"].as_str().unwrap_or("other");
                *out.entry(format!("node A refused {reason}")).or_insert(0) +=
                    v["count"].as_u64().unwrap_or(1);
            }
        }
        out
    }

    /// Stops the nodes (SIGTERM, so A prints its summary) and returns A's summary.
    pub(super) async fn stop(mut self) -> Option<serde_json::Value> {
        for c in [Some(&mut self.a), Some(&mut self.c), self.d.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Some(pid) = c.id() {
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
            }
        }
        for c in [Some(&mut self.a), Some(&mut self.c), self.d.as_mut()]
            .into_iter()
            .flatten()
        {
            if tokio::time::timeout(Duration::from_secs(3), c.wait())
                .await
                .is_err()
            {
                let _ = c.kill().await;
            }
        }
        self.relay.abort();
        // A's last lines, read by its reader task.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let e = self.events.lock().ok()?;
        e.iter()
            .rev()
            .find(|(_, v)| v["event"] == "summary")
            .map(|(_, v)| v.clone())
    }
}

/// What a CryptoDiet node accepted of a trusted node's that the node did not send it.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReplaysAccepted {
    pub(super) messages: usize,
    pub(super) slots: usize,
    pub(super) moves: usize,
    pub(super) twice: usize,
}
