//! Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256>` of
//! `<webhook-id>.<webhook-timestamp>.<body>`, keyed with the bytes a `whsec_<base64>` secret
//! holds; one `v1,…` per secret, space-separated, while a rotation's two secrets both sign.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{KeyInit as _, Mac as _};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The prefix of a webhook secret.
const PREFIX: &str = "whsec_";

/// A new secret: `whsec_` and 32 random bytes in base64.
pub fn new_secret() -> anyhow::Result<String> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| anyhow::anyhow!("no randomness for a secret: {e}"))?;
    Ok(format!("{PREFIX}{}", STANDARD.encode(key)))
}

/// The `webhook-signature` value of message `id` sent at `timestamp` (Unix seconds) with
/// `body`, one signature per secret.
pub fn signature(id: &str, timestamp: i64, body: &[u8], secrets: &[String]) -> String {
    secrets
        .iter()
        .filter_map(|secret| {
            let key = STANDARD
                .decode(secret.strip_prefix(PREFIX).unwrap_or(secret))
                .ok()?;
            let mut mac = HmacSha256::new_from_slice(&key).ok()?;
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(timestamp.to_string().as_bytes());
            mac.update(b".");
            mac.update(body);
            Some(format!(
                "v1,{}",
                STANDARD.encode(mac.finalize().into_bytes())
            ))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks specification's own example.
    #[test]
    fn signs_as_the_specification_shows() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, &[secret]),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let fresh = new_secret().unwrap();
        assert!(fresh.starts_with("whsec_") && fresh.len() > 40);
        let two = signature("m", 1, b"x", &[fresh.clone(), new_secret().unwrap()]);
        assert_eq!(two.split(' ').count(), 2);
    }
}
