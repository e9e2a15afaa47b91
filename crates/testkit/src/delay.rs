//! A loopback TCP forwarder that holds every chunk for a fixed time before passing it on, both ways: a client
//! behind it sees a slow link to its server (its requests, answers and watch events all arrive late), without any
//! fault injection in the server itself.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Listens on a free loopback port and forwards each connection to `target` (`host:port`), every chunk `delay`
/// late. Returns the address to connect to; the forwarder runs until the test's runtime ends.
pub async fn delaying_forwarder(target: &str, delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address").to_string();
    let target = target.to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&target).await else { continue };
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(late(client_read, server_write, delay));
            tokio::spawn(late(server_read, client_write, delay));
        }
    });
    addr
}

/// Copies `from` to `to`, each chunk written `delay` after it was read, in order.
async fn late(
    mut from: impl AsyncReadExt + Unpin + Send + 'static,
    mut to: impl AsyncWriteExt + Unpin,
    delay: Duration,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 || tx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    while let Some((due, chunk)) = rx.recv().await {
        tokio::time::sleep_until(due).await;
        if to.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
