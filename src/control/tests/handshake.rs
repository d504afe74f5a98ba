//! The handshake over real loopback TCP pairs: right and wrong secrets, mismatches, replays,
//! a rewritten version, and the secret file's rules (length, permissions).

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
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s");
    let private = |p: &std::path::Path| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    std::fs::write(&p, "c2VjcmV0LXNpeHRlZW4h\n").unwrap();
    private(&p);
    let (s, warning) = Secret::read(&p).unwrap();
    assert_eq!(warning, None, "a 0600 file loads without a word");
    // The trailing newline is not part of the secret.
    let (c, srv, _) = pair(Some(s.clone()), secret("c2VjcmV0LXNpeHRlZW4h"), None);
    c.unwrap();
    srv.unwrap();
    assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
    let fix = format!(
        "`umask 077; head -c32 /dev/urandom | base64 > {}`",
        p.display()
    );
    std::fs::write(&p, "\n").unwrap();
    let e = Secret::read(&p).unwrap_err();
    assert!(
        matches!(e, Error::Usage(ref m) if m.contains("is empty") && m.contains(&fix)),
        "{e}"
    );
    // 15 bytes after the trailing whitespace is dropped: refused in one line naming the fix.
    std::fs::write(&p, "fifteen-bytes-x \n\t").unwrap();
    let e = Secret::read(&p).unwrap_err();
    assert!(
        matches!(e, Error::Usage(ref m) if m.contains("holds 15 bytes, fewer than the 16")
            && m.contains(&fix) && !m.contains("fifteen") && !m.contains('\n')),
        "{e}"
    );
    std::fs::write(&p, "sixteen-bytes-xx\n").unwrap();
    assert!(Secret::read(&p).is_ok());
    let e = Secret::read(&dir.path().join("missing")).unwrap_err();
    assert!(
        matches!(e, Error::Usage(ref m) if m.contains("missing") && m.contains("umask 077; head -c32")),
        "{e}"
    );
}

#[test]
fn a_secret_file_others_can_read_loads_with_one_warning() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s");
    std::fs::write(&p, "a-secret-of-twenty-bytes\n").unwrap();
    for mode in [0o644, 0o640, 0o604] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        let (_, warning) = Secret::read(&p).unwrap();
        let w = warning.unwrap_or_else(|| panic!("no warning for {mode:o}"));
        assert!(
            w.starts_with("warning: ")
                && w.contains(&format!("(mode {mode:04o})"))
                && w.contains(&format!("`chmod 600 {}`", p.display()))
                && w.contains("defaultMode: 0400")
                && !w.contains("twenty")
                && !w.contains('\n'),
            "{w}"
        );
    }
    for mode in [0o600, 0o400] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(Secret::read(&p).unwrap().1, None, "{mode:o}");
    }
}

/// A relay between a real client and a real server that rewrites the version byte of the
/// client's first frame (its ClientHello) to `to`; returns both sides' results.
fn hello_rewritten(to: u8, server_secret: &str) -> (Result<String, AuthError>, AuthError) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server_secret = server_secret.to_string();
    let srv = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        server_handshake(&mut s, secret(&server_secret).as_ref(), "sink-a").map(|_| ())
    });
    let relay = TcpListener::bind("127.0.0.1:0").unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let mid = thread::spawn(move || {
        let (mut c, _) = relay.accept().unwrap();
        let mut s = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(T)).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let mut head = [0u8; 4];
        c.read_exact(&mut head).unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(head) as usize];
        c.read_exact(&mut body).unwrap();
        body[0] = to;
        s.write_all(&head).unwrap();
        s.write_all(&body).unwrap();
        let (mut c2, mut s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
        let up = thread::spawn(move || {
            let _ = io::copy(&mut c2, &mut s2);
            let _ = s2.shutdown(std::net::Shutdown::Write);
        });
        let _ = io::copy(&mut s, &mut c);
        let _ = c.shutdown(std::net::Shutdown::Write);
        let _ = up.join();
    });
    let mut c = TcpStream::connect(relay_addr).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    let client = client_handshake(&mut c, secret("a-shared-secret-k").as_ref(), T)
        .map(|(session, _)| session);
    drop(c);
    let server = srv.join().unwrap().unwrap_err();
    mid.join().unwrap();
    (client, server)
}

#[test]
fn a_relay_that_rewrites_the_hellos_version_fails_the_handshake() {
    use crate::control::{auth::SECRET_VERSION, frame::VERSION};
    // Down to the version before the MACs covered it: the sink refuses it for a secret.
    let (c, s) = hello_rewritten(SECRET_VERSION - 1, "a-shared-secret-k");
    assert!(
        matches!(s, AuthError::TooOld { version, .. } if version == SECRET_VERSION - 1),
        "{s}"
    );
    assert!(c.is_err(), "{c:?}");
    // Down to an older version the MACs cover: the MACs no longer match.
    let (c, s) = hello_rewritten(VERSION - 1, "a-shared-secret-k");
    assert!(matches!(s, AuthError::WrongSecret), "{s}");
    assert!(c.is_err(), "{c:?}");
    // Down to version 4 (sealed frames, the floor of a secret before version 6): the same.
    let (c, s) = hello_rewritten(4, "a-shared-secret-k");
    assert!(matches!(s, AuthError::TooOld { version: 4, .. }), "{s}");
    assert!(c.is_err(), "{c:?}");
}

/// A sink that answers a ClientHello with a challenge whose MAC covers `version` and `auth`
/// instead of what the client sent (as a sink that read a rewritten hello would); returns the
/// client's result.
fn challenged_as(version: u8, auth: bool) -> Result<String, AuthError> {
    use crate::control::frame::{read_frame, write_frame};
    use crate::control::msg::{Message, ServerChallenge};
    use hmac::{Hmac, Mac};
    let key = "a-shared-secret-k";
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let srv = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let Ok(Message::ClientHello(h)) = read_frame(&mut s) else {
            panic!("no ClientHello");
        };
        let nonce_s = [9u8; 32];
        let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key.as_bytes()).unwrap();
        m.update(b"ringblast-sink\0");
        m.update(&[version, u8::from(auth)]);
        m.update(&h.nonce);
        m.update(&nonce_s);
        let mac: [u8; 32] = m.finalize().into_bytes().into();
        write_frame(
            &mut s,
            &Message::ServerChallenge(ServerChallenge {
                nonce: nonce_s,
                auth: true,
                mac: Some(mac),
            }),
        )
        .unwrap();
        let _ = read_frame(&mut s);
    });
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    let r = client_handshake(&mut c, secret(key).as_ref(), T).map(|(session, _)| session);
    drop(c);
    srv.join().unwrap();
    r
}

#[test]
fn the_handshake_mac_covers_the_hellos_version_and_credentials_flag() {
    use crate::control::frame::VERSION;
    // The sink's MAC over what the client sent passes the client's check (it then waits for
    // an AuthOk this fake sink never sends: a frame error, not a wrong secret).
    let e = challenged_as(VERSION, true).unwrap_err();
    assert!(!matches!(e, AuthError::WrongSecret), "{e}");
    // Over any other version or flag, the client refuses it.
    for (version, auth) in [
        (VERSION - 1, true),
        (4, true),
        (VERSION + 1, true),
        (VERSION, false),
    ] {
        let e = challenged_as(version, auth).unwrap_err();
        assert!(matches!(e, AuthError::WrongSecret), "{version} {auth}: {e}");
    }
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
    for old in 1..=5 {
        let (e, reason) = hello_in_version(old);
        assert!(
            matches!(e, AuthError::TooOld { version, .. } if version == old),
            "{e}"
        );
        assert_eq!(
            reason,
            format!(
                "the sender speaks control protocol version {old}, but --secret-file needs version 6 on both sides (every frame and the version authenticated): upgrade the sender"
            )
        );
    }
    let (e, reason) = hello_in_version(11);
    assert!(matches!(e, AuthError::TooNew(11)), "{e}");
    assert_eq!(
        reason,
        "the sender speaks control protocol version 11, this sink versions 1 to 10: upgrade the sink"
    );
}
