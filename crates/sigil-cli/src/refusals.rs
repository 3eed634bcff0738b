//! What a sensor prints when the server refuses it: each refusal of its registration or of a
//! reading, and a reading nobody answered, as one line on standard error at the default log
//! level, with the reason (the server's diagnostic payload, RFC 7252 §5.5.2) and the fix. The
//! same refusal is printed once a minute at most; the next line says how many were not.

use sigil_coap::{Code, Message};
use sigil_device::{Event, PublishOutcome};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The same refusal is printed at most this often.
pub const REPEAT_EVERY: Duration = Duration::from_secs(60);

/// Distinct refusals remembered at once. The server chooses the diagnostic text, so a hostile
/// one could otherwise make the table (and the log) grow with every answer: past this, lines
/// printed longer than [`REPEAT_EVERY`] ago are forgotten, and while the table is still full
/// a new kind of refusal is counted, not printed.
const MAX_KINDS: usize = 32;

/// The refusals one sensor has printed, and the last diagnostic the server sent.
pub struct Refusals {
    identity: String,
    server: SocketAddr,
    /// Per distinct refusal: when it was last printed, and how many since were not.
    printed: HashMap<String, (Instant, u64)>,
    /// The last error answer's code and diagnostic payload, for the event it causes.
    diagnostic: Option<(Code, String)>,
    /// Refusals not printed because [`MAX_KINDS`] kinds were already remembered.
    pub suppressed: u64,
}

impl Refusals {
    pub fn new(identity: String, server: SocketAddr) -> Self {
        Self {
            identity,
            server,
            printed: HashMap::new(),
            diagnostic: None,
            suppressed: 0,
        }
    }

    /// A CoAP message from the server, before the device handles it: an error answer's
    /// diagnostic is kept for the refusal event it leads to.
    pub fn saw_answer(&mut self, datagram: &[u8]) {
        let Ok(m) = Message::parse(datagram) else {
            return;
        };
        if m.code.class() == 4 || m.code.class() == 5 {
            let text: String = String::from_utf8_lossy(m.payload)
                .chars()
                .filter(|c| !c.is_control())
                .take(120)
                .collect();
            self.diagnostic = Some((m.code, text));
        }
    }

    /// Prints the line an event calls for, if it is a refusal not printed within the last
    /// [`REPEAT_EVERY`].
    pub fn on_event(&mut self, ev: &Event) {
        let (key, line) = match *ev {
            Event::RegistrationFailed { code } => {
                let diag = self.diagnostic_for(code);
                (
                    format!("register {code} {diag}"),
                    registration_refused(code, &diag, &self.identity),
                )
            }
            Event::Published {
                seq,
                outcome: PublishOutcome::Rejected(code),
            } => {
                let diag = self.diagnostic_for(code);
                (
                    format!("publish {code} {diag}"),
                    reading_refused(seq, code, &diag, &self.identity),
                )
            }
            Event::Published {
                seq,
                outcome: PublishOutcome::TimedOut,
            } => (
                "timeout".to_string(),
                format!(
                    "reading {seq}: no answer from {} after every retransmission: is `sigil server` running there and reachable?",
                    self.server
                ),
            ),
            _ => return,
        };
        self.print(key, line);
    }

    /// The last answer was not acted on because it was not signed by the trusted server
    /// (signed answers required on coap://): an error answer among them is printed, since
    /// the device itself sees no refusal.
    pub fn not_acted_on(&mut self) {
        let Some((code, diag)) = self.diagnostic.take() else {
            return;
        };
        let what = code_and(code, &diag);
        let hint =
            if code == Code::FORBIDDEN && (diag.is_empty() || diag == "unauthorized_identity") {
                format!(
                ": if this identity is not provisioned, run `sigil provision add {}` on the server",
                self.identity
            )
            } else {
                String::new()
            };
        self.print(
            format!("unsigned {what}"),
            format!("the server answered {what} unsigned; not acted on, since this sensor acts only on answers its trusted server signed{hint}"),
        );
    }

    /// The diagnostic of the last error answer, if it had `code`.
    fn diagnostic_for(&mut self, code: Code) -> String {
        match self.diagnostic.take() {
            Some((c, text)) if c == code => text,
            _ => String::new(),
        }
    }

    fn print(&mut self, key: String, line: String) {
        let now = Instant::now();
        match self.printed.get_mut(&key) {
            Some((at, skipped)) if now.duration_since(*at) < REPEAT_EVERY => *skipped += 1,
            Some((at, skipped)) => {
                let more = std::mem::take(skipped);
                *at = now;
                if more > 0 {
                    eprintln!(
                        "sensor: {line} ({more} more like it in the last {} s)",
                        REPEAT_EVERY.as_secs()
                    );
                } else {
                    eprintln!("sensor: {line}");
                }
            }
            None => {
                if self.printed.len() >= MAX_KINDS {
                    self.printed
                        .retain(|_, (at, _)| now.duration_since(*at) < REPEAT_EVERY);
                }
                if self.printed.len() >= MAX_KINDS {
                    self.suppressed += 1;
                    return;
                }
                self.printed.insert(key, (now, 0));
                eprintln!("sensor: {line}");
            }
        }
    }
}

/// `4.03` or `4.03 unauthorized_identity`.
fn code_and(code: Code, diag: &str) -> String {
    if diag.is_empty() {
        code.to_string()
    } else {
        format!("{code} {diag}")
    }
}

/// The line for a refused registration: the reason and the fix.
pub fn registration_refused(code: Code, diag: &str, identity: &str) -> String {
    let fix = match (code, diag) {
        (Code::FORBIDDEN, "unauthorized_identity") | (Code::FORBIDDEN, "") => {
            return format!("registration refused ({code} not provisioned): run `sigil provision add {identity}` on the server (or import the device's label)");
        }
        (Code::FORBIDDEN, "revoked") => revoked_fix(identity),
        (Code::FORBIDDEN, "identity_mismatch") => {
            "the announced key does not hash to the identity (--kit or --other differ from the ones the identity was made with?)".to_string()
        }
        (Code::FORBIDDEN, "dtls_identity_mismatch") => {
            "the DTLS session authenticates another identity than the one registering".to_string()
        }
        (Code::FORBIDDEN, d) if d.contains("session") => {
            "this identity registered over its own coaps:// session: only that session may change it (register over coaps:// with --dtls)".to_string()
        }
        (Code::UNAUTHORIZED, _) => {
            "the server needs a signed statement from the registration's owner; the sensor registers again in full".to_string()
        }
        (Code::BAD_REQUEST, _) => "the server could not parse the registration".to_string(),
        (c, _) if c.class() == 5 => "the server could not store it now; the sensor tries again".to_string(),
        _ => String::new(),
    };
    let what = code_and(code, diag);
    if fix.is_empty() {
        format!("registration refused ({what})")
    } else {
        format!("registration refused ({what}): {fix}")
    }
}

/// What to do about a revoked identity.
fn revoked_fix(identity: &str) -> String {
    format!("the operator revoked this identity on the server; if that was a mistake, `sigil provision add {identity} --reinstate` re-activates it")
}

/// The line for a refused reading: the reason and the fix.
pub fn reading_refused(seq: u64, code: Code, diag: &str, identity: &str) -> String {
    let what = code_and(code, diag);
    let fix = match (code, diag) {
        (Code::FORBIDDEN, "unauthorized_identity") => format!(
            "the server does not authorize this identity (not provisioned, or revoked): run `sigil provision add {identity}` on the server"
        ),
        (Code::FORBIDDEN, "revoked") => revoked_fix(identity),
        (Code::FORBIDDEN, "dtls_identity_mismatch") => {
            "the DTLS session authenticates another identity than the reading's".to_string()
        }
        (Code::UNAUTHORIZED, "bad_signature") => {
            "the signature does not verify under the registered key".to_string()
        }
        (Code::UNAUTHORIZED, "no_session") => {
            "a PSK-only node's readings must come over its own coaps:// session".to_string()
        }
        (Code::BAD_REQUEST, _) => "the server could not parse the reading".to_string(),
        _ => String::new(),
    };
    if fix.is_empty() {
        format!("reading {seq} refused ({what})")
    } else {
        format!("reading {seq} refused ({what}): {fix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_fix() {
        // Distinct diagnostics chosen by the server fill at most MAX_KINDS entries.
        let mut r = Refusals::new("ID".into(), "127.0.0.1:5683".parse().unwrap());
        for i in 0..1000 {
            r.print(format!("kind {i}"), format!("line {i}"));
        }
        assert_eq!(r.printed.len(), MAX_KINDS);
        assert_eq!(r.suppressed, 1000 - MAX_KINDS as u64);
        assert!(registration_refused(Code::FORBIDDEN, "revoked", "ID")
            .ends_with("`sigil provision add ID --reinstate` re-activates it"));
        assert!(reading_refused(3, Code::FORBIDDEN, "revoked", "ID")
            .starts_with("reading 3 refused (4.03 revoked): the operator revoked"));
        let line = registration_refused(Code::FORBIDDEN, "unauthorized_identity", "ID");
        assert_eq!(
            line,
            "registration refused (4.03 not provisioned): run `sigil provision add ID` on the server (or import the device's label)"
        );
        assert!(
            reading_refused(7, Code::FORBIDDEN, "unauthorized_identity", "ID").starts_with(
                "reading 7 refused (4.03 unauthorized_identity): the server does not authorize"
            )
        );
        assert_eq!(
            reading_refused(7, Code::new(4, 4), "", "ID"),
            "reading 7 refused (4.04)"
        );
    }

    #[test]
    fn a_diagnostic_goes_with_the_event_of_its_code_only() {
        let mut r = Refusals::new("ID".into(), "127.0.0.1:5683".parse().unwrap());
        // A 4.03 ACK with the diagnostic "unauthorized_identity".
        let mut buf = [0u8; 64];
        let mut b = sigil_coap::MessageBuilder::new(
            &mut buf,
            sigil_coap::MessageType::Acknowledgement,
            Code::FORBIDDEN,
            1,
            &[1],
        )
        .unwrap();
        b.option(12, &[0]).unwrap();
        let n = b.finish_with_payload(b"unauthorized_identity").unwrap();
        r.saw_answer(&buf[..n]);
        assert_eq!(r.diagnostic_for(Code::UNAUTHORIZED), "");
        r.saw_answer(&buf[..n]);
        assert_eq!(r.diagnostic_for(Code::FORBIDDEN), "unauthorized_identity");
        assert_eq!(r.diagnostic_for(Code::FORBIDDEN), "");
    }
}
