//! The client's side of Observe (RFC 7641) against a scripted server on a loopback socket:
//! notifications come once each in order (§3.4: an older one, after a newer, is discarded),
//! Confirmable ones are acknowledged (a repeated one again), one for a token the client does
//! not hold is answered with Reset (§3.6), and a notification that arrives while a request
//! waits for its answer is kept for the next call.

mod common;
use common::{recv, scripted};
use sigil_coap::{option, Code, Message, MessageBuilder, MessageType};
use std::time::Duration;

/// A notification (or response) with `token`, Observe `seq` and `payload`.
fn notification(mtype: MessageType, mid: u16, token: &[u8], seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut buf = [0u8; 256];
    let mut b = MessageBuilder::new(&mut buf, mtype, Code::CONTENT, mid, token).unwrap();
    b.uint_option(option::OBSERVE, seq).unwrap();
    b.uint_option(option::MAX_AGE, 60).unwrap();
    let n = b.finish_with_payload(payload).unwrap();
    buf[..n].to_vec()
}

#[tokio::test]
async fn notifications_come_once_each_in_order_and_strangers_are_reset() {
    let (server, mut client) = scripted().await;
    let script = tokio::spawn(async move {
        // The registration: answered 2.05 with Observe 5.
        let (req, from) = recv(&server).await;
        let m = Message::parse(&req).unwrap();
        assert_eq!(m.observe(), Some(0));
        let token = m.token.to_vec();
        let mut buf = [0u8; 128];
        let mut b = MessageBuilder::new(
            &mut buf,
            MessageType::Acknowledgement,
            Code::CONTENT,
            m.message_id,
            &token,
        )
        .unwrap();
        b.uint_option(option::OBSERVE, 5).unwrap();
        let n = b.finish_with_payload(b"r5").unwrap();
        server.send_to(&buf[..n], from).await.unwrap();
        // 7, then 6 (older: discarded), a Confirmable 8 sent twice (acknowledged twice), a
        // stranger's token, then 9.
        for (mtype, mid, seq, token) in [
            (MessageType::NonConfirmable, 100, 7, token.clone()),
            (MessageType::NonConfirmable, 101, 6, token.clone()),
            (MessageType::Confirmable, 102, 8, token.clone()),
            (MessageType::Confirmable, 102, 8, token.clone()),
            (MessageType::Confirmable, 103, 1, vec![0xee]),
            (MessageType::NonConfirmable, 104, 9, token.clone()),
        ] {
            let payload = format!("r{seq}");
            server
                .send_to(
                    &notification(mtype, mid, &token, seq, payload.as_bytes()),
                    from,
                )
                .await
                .unwrap();
        }
        // What the client sent back: two ACKs for 102, a Reset for 103.
        let mut back = vec![];
        for _ in 0..3 {
            let (d, _) = recv(&server).await;
            let m = Message::parse(&d).unwrap();
            back.push((m.mtype, m.message_id));
        }
        back
    });
    let r = client.observe("ps/1/m").await.unwrap();
    assert_eq!(
        (r.code, r.observe, r.payload.as_slice()),
        (Code::CONTENT, Some(5), &b"r5"[..])
    );
    let mut got = vec![];
    while got.len() < 3 {
        let n = client
            .next_notification(Duration::from_secs(5))
            .await
            .unwrap()
            .expect("a notification");
        got.push(String::from_utf8(n.payload).unwrap());
    }
    assert_eq!(
        got,
        ["r7", "r8", "r9"],
        "each once, the older one discarded"
    );
    assert_eq!(client.stale_notifications(), 2, "6 after 7, and 8 again");
    let back = script.await.unwrap();
    assert_eq!(
        back,
        [
            (MessageType::Acknowledgement, 102),
            (MessageType::Acknowledgement, 102),
            (MessageType::Reset, 103)
        ]
    );
}

#[tokio::test]
async fn notifications_that_arrive_while_a_request_waits_are_kept_within_a_bound() {
    let (server, mut client) = scripted().await;
    let script = tokio::spawn(async move {
        let (req, from) = recv(&server).await;
        let m = Message::parse(&req).unwrap();
        let token = m.token.to_vec();
        let mut buf = [0u8; 128];
        let mut b = MessageBuilder::new(
            &mut buf,
            MessageType::Acknowledgement,
            Code::CONTENT,
            m.message_id,
            &token,
        )
        .unwrap();
        b.uint_option(option::OBSERVE, 1).unwrap();
        let n = b.finish_with_payload(b"r1").unwrap();
        server.send_to(&buf[..n], from).await.unwrap();
        // A GET: 200 notifications before its answer.
        let (req, from) = recv(&server).await;
        let get = Message::parse(&req).unwrap();
        for seq in 2..202u32 {
            let n = notification(MessageType::NonConfirmable, seq as u16, &token, seq, b"x");
            server.send_to(&n, from).await.unwrap();
        }
        let b = MessageBuilder::new(
            &mut buf,
            MessageType::Acknowledgement,
            Code::CONTENT,
            get.message_id,
            get.token,
        )
        .unwrap();
        let n = b.finish_with_payload(b"answer").unwrap();
        server.send_to(&buf[..n], from).await.unwrap();
    });
    client.observe("ps/1/m").await.unwrap();
    let r = client.get("ps", &[]).await.unwrap();
    assert_eq!(r.payload, b"answer");
    script.await.unwrap();
    let mut kept = vec![];
    while let Some(n) = client
        .next_notification(Duration::from_millis(200))
        .await
        .unwrap()
    {
        kept.push(n.observe.unwrap());
    }
    assert_eq!(kept.len(), 64, "at most 64 kept");
    assert_eq!(kept.last(), Some(&201), "the newest kept");
    assert_eq!(client.stale_notifications(), 200 - 64);
}
