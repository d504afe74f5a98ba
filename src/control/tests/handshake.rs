//! The handshake over real loopback TCP pairs: right and wrong secrets, mismatches, replays,
//! and the secret file's rules.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use crate::control::auth::{AuthError, Secret, client_handshake, server_handshake};
use crate::error::Error;

const T: Duration = Duration::from_secs(5);

/// Runs one handshake over loopback TCP; the client's raw bytes are recorded.
fn pair(
    client: Option<Secret>,
    server: Option<Secret>,
    client_script: Option<Vec<u8>>,
) -> (Result<String, AuthError>, Result<(), AuthError>, Vec<u8>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let srv = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        server_handshake(&mut s, server.as_ref(), "sink-a").map(|_| ())
    });
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut rec = Recorder {
        s,
        sent: Vec::new(),
    };
    let c = match client_script {
        None => client_handshake(&mut rec, client.as_ref(), T).map(|(session, _)| session),
        Some(bytes) => {
            // Replay: send the recorded bytes verbatim, then see what the server says.
            rec.s.write_all(&bytes).unwrap();
            let _ = rec.s.shutdown(std::net::Shutdown::Write);
            Err(AuthError::Timeout)
        }
    };
    (c, srv.join().unwrap(), rec.sent)
}

struct Recorder {
    s: TcpStream,
    sent: Vec<u8>,
}

impl Read for Recorder {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.s.read(buf)
    }
}

impl Write for Recorder {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.s.write(buf)?;
        self.sent.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.s.flush()
    }
}

fn secret(s: &str) -> Option<Secret> {
    Secret::new(s.as_bytes())
}

#[test]
fn right_secret_and_insecure_mode_succeed() {
    let (c, s, _) = pair(secret("k1"), secret("k1"), None);
    assert_eq!(c.unwrap(), "sink-a");
    s.unwrap();
    let (c, s, _) = pair(None, None, None);
    assert_eq!(c.unwrap(), "sink-a");
    s.unwrap();
}

#[test]
fn wrong_secret_refused_on_both_sides() {
    let (c, s, _) = pair(secret("k1"), secret("k2"), None);
    let c = c.unwrap_err();
    assert!(matches!(c, AuthError::WrongSecret));
    assert_eq!(
        c.to_string(),
        "wrong secret (check --secret-file on both sides)"
    );
    assert!(matches!(s.unwrap_err(), AuthError::WrongSecret));
}

#[test]
fn secret_mismatch_refused_on_both_sides() {
    let (c, s, _) = pair(None, secret("k"), None);
    let c = c.unwrap_err().to_string();
    assert!(c.contains("requires --secret-file"), "{c}");
    assert!(matches!(s.unwrap_err(), AuthError::MissingCredentials));
    let (c, s, _) = pair(secret("k"), None, None);
    let c = c.unwrap_err().to_string();
    assert!(c.contains("has no --secret-file"), "{c}");
    assert!(matches!(s.unwrap_err(), AuthError::UnexpectedCredentials));
}

#[test]
fn replayed_handshake_fails() {
    let (c, s, recorded) = pair(secret("k"), secret("k"), None);
    c.unwrap();
    s.unwrap();
    // ClientHello + ClientAuth from the good handshake, replayed against a new connection.
    let (_, s, _) = pair(None, secret("k"), Some(recorded));
    assert!(matches!(s.unwrap_err(), AuthError::WrongSecret));
}

#[test]
fn secret_file_rules() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s");
    std::fs::write(&p, "c2VjcmV0\n").unwrap();
    let s = Secret::from_file(&p).unwrap();
    // The trailing newline is not part of the secret.
    let (c, srv, _) = pair(Some(s.clone()), secret("c2VjcmV0"), None);
    c.unwrap();
    srv.unwrap();
    assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
    std::fs::write(&p, "\n").unwrap();
    let e = Secret::from_file(&p).unwrap_err();
    assert!(
        matches!(e, Error::Usage(ref m) if m.contains("is empty") && m.contains("head -c32")),
        "{e}"
    );
    let e = Secret::from_file(dir.path().join("missing")).unwrap_err();
    assert!(
        matches!(e, Error::Usage(ref m) if m.contains("missing") && m.contains("head -c32")),
        "{e}"
    );
}

/// Sends a ClientHello in protocol `version` to a sink with a secret; returns the sink's
/// error and the reason of the Refused frame the client got back.
fn hello_in_version(version: u8) -> (AuthError, String) {
    use crate::control::frame::{VERSION, encode_as, read_frame, write_frame_as};
    use crate::control::msg::{ClientHello, Message};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let srv = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        server_handshake(&mut s, secret("k").as_ref(), "sink-a").map(|_| ())
    });
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let hello = Message::ClientHello(ClientHello {
        nonce: [5; 32],
        auth: true,
    });
    if version <= VERSION {
        write_frame_as(&mut s, &hello, version).unwrap();
    } else {
        // A newer sender's frame: this build's bytes with its version byte.
        let mut frame = encode_as(&hello, VERSION).unwrap();
        frame[4] = version;
        s.write_all(&frame).unwrap();
    }
    let reason = match read_frame(&mut s) {
        Ok(Message::Refused(r)) => r.reason,
        other => panic!("expected Refused, got {other:?}"),
    };
    (srv.join().unwrap().unwrap_err(), reason)
}

#[test]
fn a_sink_with_a_secret_names_the_version_an_older_or_newer_sender_needs() {
    for old in 1..=3 {
        let (e, reason) = hello_in_version(old);
        assert!(
            matches!(e, AuthError::TooOld { version, .. } if version == old),
            "{e}"
        );
        assert_eq!(
            reason,
            format!(
                "the sender speaks control protocol version {old}, but --secret-file needs version 4 on both sides (every frame authenticated): upgrade the sender"
            )
        );
    }
    let (e, reason) = hello_in_version(9);
    assert!(matches!(e, AuthError::TooNew(9)), "{e}");
    assert_eq!(
        reason,
        "the sender speaks control protocol version 9, this sink versions 1 to 5: upgrade the sink"
    );
}
