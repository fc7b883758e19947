//! What an API key looks like: `sr_<prefix>_<secret><checksum>`.
//!
//! The prefix (8 of `a-z0-9`) is shown in lists and logs to tell keys apart; the secret is 32
//! base62 characters (190 bits) from the operating system's generator; the checksum, the CRC-32
//! of everything before it in 6 base62 characters, lets a scanner (or this service, before any
//! lookup) recognise a key and reject a mistyped one. Only the SHA-256 of the whole key is kept.

use sha2::{Digest as _, Sha256};

const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const PREFIX_LEN: usize = 8;
const SECRET_LEN: usize = 32;
const CHECKSUM_LEN: usize = 6;

/// A key just made: the whole text (shown once), its visible prefix and its hash.
#[derive(Debug, Clone)]
pub struct MadeKey {
    pub key: String,
    pub prefix: String,
    pub hash: String,
}

/// Makes a new key.
pub fn make() -> anyhow::Result<MadeKey> {
    let prefix = random_text(PREFIX_LEN, &ALPHABET[..36])?.to_ascii_lowercase();
    let secret = random_text(SECRET_LEN, ALPHABET)?;
    let body = format!("sr_{prefix}_{secret}");
    let key = format!("{body}{}", checksum(&body));
    Ok(MadeKey {
        hash: hash(&key),
        key,
        prefix,
    })
}

/// Whether `text` has the form of a key, its checksum included.
pub fn is_key(text: &str) -> bool {
    let Some(rest) = text.strip_prefix("sr_") else {
        return false;
    };
    let Some((prefix, tail)) = rest.split_once('_') else {
        return false;
    };
    prefix.len() == PREFIX_LEN
        && prefix
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
        && tail.len() == SECRET_LEN + CHECKSUM_LEN
        && tail.bytes().all(|b| b.is_ascii_alphanumeric())
        && checksum(&text[..text.len() - CHECKSUM_LEN]) == text[text.len() - CHECKSUM_LEN..]
}

/// What is stored for a key: its SHA-256, hex. A key carries 190 random bits, so a fast hash
/// is enough (a slow one protects guessable passwords, which keys are not).
pub fn hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

fn checksum(body: &str) -> String {
    let mut n = u64::from(crc32fast::hash(body.as_bytes()));
    let mut out = [b'0'; CHECKSUM_LEN];
    for place in out.iter_mut().rev() {
        *place = ALPHABET[(n % 62) as usize];
        n /= 62;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `len` characters of `alphabet`, uniformly (bytes past the largest multiple of its length
/// are drawn again).
fn random_text(len: usize, alphabet: &[u8]) -> anyhow::Result<String> {
    let limit = 256 - 256 % alphabet.len();
    let mut out = String::with_capacity(len);
    let mut bytes = [0u8; 64];
    while out.len() < len {
        getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no random bytes: {e}"))?;
        for &b in &bytes {
            if (b as usize) < limit && out.len() < len {
                out.push(alphabet[b as usize % alphabet.len()] as char);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_key_is_recognised_and_a_changed_one_is_not() {
        let made = make().unwrap();
        assert!(made.key.starts_with(&format!("sr_{}_", made.prefix)));
        assert_eq!(
            made.key.len(),
            3 + PREFIX_LEN + 1 + SECRET_LEN + CHECKSUM_LEN
        );
        assert!(is_key(&made.key), "{}", made.key);
        assert_eq!(made.hash, hash(&made.key));
        assert_eq!(made.hash.len(), 64);
        assert!(!made.hash.contains(&made.key[12..]));
        // One character changed anywhere fails the checksum (or the form).
        for i in 3..made.key.len() {
            let mut bytes = made.key.clone().into_bytes();
            if bytes[i] == b'_' {
                continue;
            }
            bytes[i] = if bytes[i] == b'a' { b'b' } else { b'a' };
            let changed = String::from_utf8(bytes).unwrap();
            assert!(!is_key(&changed), "{changed}");
        }
        for text in [
            "",
            "sr_",
            "sr_abc_def",
            "tok-5b1f0c9e8d7a6b5c",
            &made.key[1..],
        ] {
            assert!(!is_key(text), "{text}");
        }
        assert_ne!(make().unwrap().key, made.key);
    }
}
