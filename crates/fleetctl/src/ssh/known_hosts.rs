//! Host key checking as the original fleetctl does it (spec §9.9, `ssh/known_hosts.go`, `ssh/match.go`): an
//! OpenSSH-format known-hosts file of its own (`~/.fleetctl/known_hosts` by default), host patterns with `*`, `?`
//! and `!`, entries written as `host` for port 22 and `[host]:port` otherwise, MD5 fingerprints in the prompt and
//! in the mismatch warning, and the original's words byte for byte.
//!
//! The checker is plain synchronous code: the SSH handshake calls it on a blocking thread with the process's
//! stdin and stderr; tests call it with buffers.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Printed (to stderr) when a known host presents another key; placeholders: algorithm, fingerprint, file.
const WARNING_REMOTE_HOST_CHANGED: &str = "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Someone could be eavesdropping on you right now (man-in-the-middle attack)!
It is also possible that a host key has just been changed.
The fingerprint for the {algo} key sent by the remote host is
{fingerprint}.
Please contact your system administrator.
Add correct host key in {file} to get rid of this message.
Host key verification failed.
";

/// Why a host key was not accepted. The texts are the original's error values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostKeyError {
    /// The host is known with other keys.
    #[error("host key mismatch")]
    Mismatch,
    /// The host is unknown and the user did not answer yes.
    #[error("unauthorized host")]
    Untrusted,
}

/// A known-hosts file and how to ask about unknown hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownHosts {
    path: PathBuf,
}

/// One usable line of a known-hosts file: its host patterns and key (OpenSSH public key text, `type base64`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    hosts: String,
    key_type: String,
    key_blob: Vec<u8>,
}

impl KnownHosts {
    /// The file at `path`, with `~` and `~user` expanded (`pkg.ParseFilepath`).
    pub fn new(path: &str) -> Self {
        KnownHosts { path: expand_tilde(path) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks the key `(key_type, key_blob)` (SSH wire format) presented by `host:port`. Known and equal: `Ok`.
    /// Known with other keys: the warning on `err`, `Mismatch`. Unknown: the prompt on `err`, one answer from
    /// `ask`; yes/y (any case) appends the key and prints the "Permanently added" line; else `Untrusted`.
    pub fn check(
        &self,
        host: &str,
        port: u16,
        key_type: &str,
        key_blob: &[u8],
        ask: &mut dyn FnMut() -> String,
        err: &mut dyn Write,
    ) -> Result<(), HostKeyError> {
        let addr = host_entry_name(host, port);
        let algo = algo_string(key_type);
        let fingerprint = md5_fingerprint(key_blob);
        let entries = match std::fs::read_to_string(&self.path) {
            Ok(text) => self.parse(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                tracing::error!("Failed to read known_hosts file {}: {e}", self.path.display());
                Vec::new()
            }
        };
        let mut mismatched = false;
        for entry in entries.iter().filter(|e| match_host(&addr, &e.hosts)) {
            // Any matching key is a success, whatever other entries say.
            if entry.key_type == key_type && entry.key_blob == key_blob {
                return Ok(());
            }
            mismatched = true;
        }
        if mismatched {
            let text = WARNING_REMOTE_HOST_CHANGED
                .replace("{algo}", &algo)
                .replace("{fingerprint}", &fingerprint)
                .replace("{file}", &self.path.display().to_string());
            let _ = err.write_all(text.as_bytes());
            return Err(HostKeyError::Mismatch);
        }
        let _ = write!(
            err,
            "The authenticity of host '{addr}' can't be established.\n{algo} key fingerprint is {fingerprint}.\n\
             Are you sure you want to continue connecting (yes/no)? "
        );
        let _ = err.flush();
        let answer = ask();
        let word = answer.split_whitespace().next().unwrap_or("").to_lowercase();
        if word != "yes" && word != "y" {
            let _ = writeln!(err, "Host key verification failed.");
            return Err(HostKeyError::Untrusted);
        }
        if let Err(e) = self.append(&addr, key_type, key_blob) {
            tracing::debug!(error = %e, "cannot write known hosts");
            let _ = writeln!(err, "Failed to add the host to the list of known hosts ({}).", self.path.display());
            return Ok(());
        }
        let _ = writeln!(err, "Warning: Permanently added '{addr}' ({algo}) to the list of known hosts.");
        Ok(())
    }

    fn parse(&self, text: &str) -> Vec<Entry> {
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            match parse_line(line) {
                Ok(Some(e)) => out.push(e),
                Ok(None) => {}
                Err(why) => tracing::warn!("{}:{} - {why}", self.path.display(), n + 1),
            }
        }
        out
    }

    fn append(&self, addr: &str, key_type: &str, key_blob: &[u8]) -> std::io::Result<()> {
        use base64::Engine;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        let mut f = std::fs::OpenOptions::new().create(true).append(true).mode(0o644).open(&self.path)?;
        let b64 = base64::engine::general_purpose::STANDARD.encode(key_blob);
        f.write_all(format!("{addr} {key_type} {b64}\n").as_bytes())
    }
}

/// `host` for port 22 (or 0), `[host]:port` otherwise; a bare IPv6 host is bracketed (OpenSSH `put_host_port`).
pub fn host_entry_name(host: &str, port: u16) -> String {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if port == 0 || port == 22 {
        if host.contains(':') { format!("[{host}]") } else { host.to_string() }
    } else {
        format!("[{host}]:{port}")
    }
}

/// Short names of key algorithms as the original prints them.
pub fn algo_string(key_type: &str) -> String {
    match key_type {
        "ssh-rsa" => "RSA".into(),
        "ssh-dss" => "DSA".into(),
        "ecdsa-sha2-nistp256" | "ecdsa-sha2-nistp384" | "ecdsa-sha2-nistp521" => "ECDSA".into(),
        other => other.into(),
    }
}

/// MD5 of the key blob as colon-separated lower-case hex.
pub fn md5_fingerprint(blob: &[u8]) -> String {
    let digest = md5::compute(blob);
    digest.0.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

fn parse_line(line: &str) -> Result<Option<Entry>, String> {
    use base64::Engine;
    let line = line.trim_start_matches([' ', '\t']);
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    if line.starts_with('@') {
        return Err("marker functionality not implemented".into());
    }
    let Some(end) = line.find([' ', '\t']).filter(|&i| i > 0) else {
        return Err("bad format (insufficient fields)".into());
    };
    let hosts = &line[..end];
    if hosts.starts_with('|') {
        return Err("hashed hosts not implemented".into());
    }
    let mut fields = line[end..].split_whitespace();
    let (Some(key_type), Some(b64)) = (fields.next(), fields.next()) else {
        return Err("error parsing key: ssh: no key found".into());
    };
    let blob = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| format!("error parsing key: {e}"))?;
    Ok(Some(Entry { hosts: hosts.to_string(), key_type: key_type.to_string(), key_blob: blob }))
}

/// Whether `addr` matches the comma-separated pattern list (OpenSSH `match_hostname`): a negated pattern that
/// matches rejects, else any positive match accepts.
pub fn match_host(addr: &str, patterns: &str) -> bool {
    let addr = addr.to_lowercase();
    let mut matched = false;
    for p in patterns.split(',') {
        let p = p.to_lowercase();
        if let Some(neg) = p.strip_prefix('!') {
            if wildcard(neg.as_bytes(), addr.as_bytes()) {
                return false;
            }
        } else if wildcard(p.as_bytes(), addr.as_bytes()) {
            matched = true;
        }
    }
    matched
}

fn wildcard(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => wildcard(&p[1..], s) || (!s.is_empty() && wildcard(p, &s[1..])),
        (Some(b'?'), Some(_)) => wildcard(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => wildcard(&p[1..], &s[1..]),
        _ => false,
    }
}

/// `~` → `$HOME`, `~user` → that user's home (from /etc/passwd); anything else unchanged.
pub fn expand_tilde(path: &str) -> PathBuf {
    let Some(rest) = path.strip_prefix('~') else { return PathBuf::from(path) };
    let (user, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let home =
        if user.is_empty() { std::env::var("HOME").ok().or_else(|| home_of(&current_user())) } else { home_of(user) };
    match home {
        Some(h) if tail.is_empty() => PathBuf::from(h),
        Some(h) => Path::new(&h).join(tail),
        None => PathBuf::from(path),
    }
}

fn current_user() -> String {
    std::env::var("USER").unwrap_or_default()
}

fn home_of(user: &str) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().map(|l| l.split(':').collect::<Vec<_>>()).find(|f| f.len() > 5 && f[0] == user).map(|f| f[5].into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOB: &[u8] = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20abcdefghijklmnopqrstuvwxyz012345";

    fn checker() -> (tempfile::TempDir, KnownHosts) {
        let dir = tempfile::tempdir().unwrap();
        let kh = KnownHosts::new(dir.path().join("sub/known_hosts").to_str().unwrap());
        (dir, kh)
    }

    fn check(kh: &KnownHosts, host: &str, port: u16, blob: &[u8], answer: &str) -> (Result<(), HostKeyError>, String) {
        let mut err = Vec::new();
        let mut asked = 0;
        let r = kh.check(
            host,
            port,
            "ssh-ed25519",
            blob,
            &mut || {
                asked += 1;
                answer.to_string()
            },
            &mut err,
        );
        (r, String::from_utf8(err).unwrap())
    }

    #[test]
    fn unknown_host_is_prompted_for_and_recorded_on_yes() {
        let (_d, kh) = checker();
        let fp = md5_fingerprint(BLOB);
        let (r, err) = check(&kh, "10.0.0.2", 22, BLOB, "yes\n");
        assert_eq!(r, Ok(()));
        assert_eq!(
            err,
            format!(
                "The authenticity of host '10.0.0.2' can't be established.\nssh-ed25519 key fingerprint is {fp}.\n\
                 Are you sure you want to continue connecting (yes/no)? \
                 Warning: Permanently added '10.0.0.2' (ssh-ed25519) to the list of known hosts.\n"
            )
        );
        let text = std::fs::read_to_string(kh.path()).unwrap();
        assert!(text.starts_with("10.0.0.2 ssh-ed25519 AAAAC3"), "{text}");
        // Known now: silent.
        assert_eq!(check(&kh, "10.0.0.2", 22, BLOB, "no"), (Ok(()), String::new()));
        // Another port is another host.
        let (r, err) = check(&kh, "10.0.0.2", 2222, BLOB, "Y");
        assert_eq!(r, Ok(()));
        assert!(err.contains("Permanently added '[10.0.0.2]:2222' (ssh-ed25519)"), "{err}");
    }

    #[test]
    fn unknown_host_refused_without_yes() {
        let (_d, kh) = checker();
        let (r, err) = check(&kh, "10.0.0.2", 22, BLOB, "");
        assert_eq!(r, Err(HostKeyError::Untrusted));
        assert!(err.ends_with("(yes/no)? Host key verification failed.\n"), "{err}");
        assert!(!kh.path().exists());
    }

    #[test]
    fn changed_key_is_refused_with_the_warning() {
        let (_d, kh) = checker();
        assert_eq!(check(&kh, "10.0.0.2", 22, BLOB, "yes").0, Ok(()));
        let mut other = BLOB.to_vec();
        *other.last_mut().unwrap() = b'X';
        let (r, err) = check(&kh, "10.0.0.2", 22, &other, "yes");
        assert_eq!(r, Err(HostKeyError::Mismatch));
        assert!(
            err.starts_with("@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n@    WARNING: REMOTE HOST")
        );
        assert!(err.contains(&format!(
            "The fingerprint for the ssh-ed25519 key sent by the remote host is\n{}.\n",
            md5_fingerprint(&other)
        )));
        assert!(err.contains(&format!("Add correct host key in {} to get rid", kh.path().display())));
        assert!(err.ends_with("Host key verification failed.\n"));
        assert_eq!(HostKeyError::Mismatch.to_string(), "host key mismatch");
    }

    #[test]
    fn comments_markers_and_hashed_hosts_are_skipped_and_patterns_match() {
        let (_d, kh) = checker();
        std::fs::create_dir_all(kh.path().parent().unwrap()).unwrap();
        std::fs::write(
            kh.path(),
            "# comment\n\n@cert-authority * ssh-ed25519 AAAA\n|1|abc|def ssh-ed25519 AAAA\nbroken\n\
             10.0.*,!10.0.0.9 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6MDEyMzQ1\n",
        )
        .unwrap();
        assert_eq!(check(&kh, "10.0.0.3", 22, BLOB, "no"), (Ok(()), String::new()));
        assert_eq!(check(&kh, "10.0.0.9", 22, BLOB, "no").0, Err(HostKeyError::Untrusted));
    }

    #[test]
    fn names_algorithms_and_fingerprints() {
        assert_eq!(host_entry_name("fe80::1", 22), "[fe80::1]");
        assert_eq!(host_entry_name("h", 2222), "[h]:2222");
        assert_eq!(algo_string("ssh-rsa"), "RSA");
        assert_eq!(algo_string("ecdsa-sha2-nistp384"), "ECDSA");
        assert_eq!(md5_fingerprint(b"").len(), 47);
        assert!(match_host("m1.example", "*.example"));
        assert!(!match_host("m1.example", "m?.other"));
        assert_eq!(expand_tilde("/a/b"), PathBuf::from("/a/b"));
        assert_eq!(expand_tilde("~root/x"), PathBuf::from("/root/x"));
    }
}
