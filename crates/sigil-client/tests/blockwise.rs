//! The client's block-wise transfers (RFC 7959) against a scripted server on a loopback
//! socket: a server that asks for smaller Block1 blocks in its 2.31 Continue (§2.5, Figure 6)
//! gets the rest of the body in its size, from the right offset; a 2.31 that names another
//! block ends the upload with an error instead of sending the wrong bytes.

mod common;
use common::{recv, scripted};
use sigil_client::coap::RequestSpec;
use sigil_coap::{option, BlockOption, Code, Message, MessageBuilder, MessageType};
use std::time::Duration;

/// The piggybacked answer to `req` with `code` and a Block1 option `b1`.
fn answer(req: &Message<'_>, code: Code, b1: BlockOption) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let mut b = MessageBuilder::new(
        &mut buf,
        MessageType::Acknowledgement,
        code,
        req.message_id,
        req.token,
    )
    .unwrap();
    let (v, n) = b1.encode().unwrap();
    b.option(option::BLOCK1, &v[..n]).unwrap();
    let n = b.finish();
    buf[..n].to_vec()
}

fn body() -> Vec<u8> {
    (0..2000u32).map(|i| (i * 7 + i / 256) as u8).collect()
}

#[tokio::test]
async fn an_upload_follows_a_server_asking_for_smaller_blocks() {
    let (server, mut client) = scripted().await;
    assert_eq!(client.szx, 6);
    let script = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut blocks = Vec::new();
        loop {
            let (req, from) = recv(&server).await;
            let m = Message::parse(&req).unwrap();
            let b1 = m
                .block1()
                .expect("a 2,000-byte body goes in blocks")
                .unwrap();
            assert_eq!(b1.offset(), got.len(), "block {b1:?} out of sequence");
            got.extend_from_slice(m.payload);
            blocks.push((b1.num, b1.szx, m.payload.len()));
            if !b1.more {
                let r = answer(&m, Code::CHANGED, b1);
                server.send_to(&r, from).await.unwrap();
                return (got, blocks);
            }
            // After the first 1,024-byte block: 256-byte blocks from now on (RFC 7959
            // Figure 6: the echo carries the client's number in the server's size).
            let echo = BlockOption::new(b1.num, true, 4);
            server
                .send_to(&answer(&m, Code::CONTINUE, echo), from)
                .await
                .unwrap();
        }
    });
    let body = body();
    let r = client
        .request(
            Code::POST,
            &RequestSpec {
                path: "up",
                payload: &body,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(r.code, Code::CHANGED);
    let (got, blocks) = script.await.unwrap();
    assert_eq!(got, body);
    // 1,024 bytes, then 256-byte blocks numbered from offset 1,024 (block 4), the last short.
    assert_eq!(
        blocks,
        vec![
            (0, 6, 1024),
            (4, 4, 256),
            (5, 4, 256),
            (6, 4, 256),
            (7, 4, 208)
        ]
    );
}

#[tokio::test]
async fn a_continue_for_another_block_ends_the_upload() {
    let (server, mut client) = scripted().await;
    let script = tokio::spawn(async move {
        let (req, from) = recv(&server).await;
        let m = Message::parse(&req).unwrap();
        // 2.31 for block 3, although block 0 was sent.
        let r = answer(&m, Code::CONTINUE, BlockOption::new(3, true, 6));
        server.send_to(&r, from).await.unwrap();
        // Nothing more comes: the client stopped.
        let mut buf = [0u8; 2048];
        tokio::time::timeout(Duration::from_millis(500), server.recv_from(&mut buf))
            .await
            .is_err()
    });
    let body = body();
    let err = client
        .request(
            Code::POST,
            &RequestSpec {
                path: "up",
                payload: &body,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("2.31 Continue for a block not sent"),
        "{err}"
    );
    assert!(
        script.await.unwrap(),
        "the client sent a block after a wrong 2.31"
    );
}

/// A server that answers every Block2 request with block 0 again: the download ends with an
/// error at the second answer instead of starting over for ever.
#[tokio::test]
async fn a_download_that_goes_back_to_block_0_ends() {
    let (server, mut client) = scripted().await;
    let script = tokio::spawn(async move {
        let mut answered = 0;
        let mut buf = [0u8; 2048];
        while let Ok(Ok((n, from))) =
            tokio::time::timeout(Duration::from_millis(500), server.recv_from(&mut buf)).await
        {
            let m = Message::parse(&buf[..n]).unwrap();
            let mut out = [0u8; 1200];
            let mut b = MessageBuilder::new(
                &mut out,
                MessageType::Acknowledgement,
                Code::CONTENT,
                m.message_id,
                m.token,
            )
            .unwrap();
            let (v, vn) = BlockOption::new(0, true, 6).encode().unwrap();
            b.option(option::BLOCK2, &v[..vn]).unwrap();
            let k = b.finish_with_payload(&[7u8; 1024]).unwrap();
            server.send_to(&out[..k], from).await.unwrap();
            answered += 1;
        }
        answered
    });
    let err = client.get("big", &[]).await.unwrap_err();
    assert!(err.to_string().contains("out of sequence"), "{err}");
    assert_eq!(
        script.await.unwrap(),
        2,
        "one answer for the first block, one for the second"
    );
}
