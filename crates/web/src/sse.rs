//! Reading Server-Sent Events from a byte stream as it arrives: the example client reads the
//! service's run events this way, and the agent reads model providers' streamed answers.

use serde_json::Value;

/// Complete frames of an event stream, cut from the bytes pushed so far.
#[derive(Debug, Default)]
pub struct Frames {
    buffer: Vec<u8>,
}

impl Frames {
    /// The frames `bytes` completed, as (event name, data): the data parsed as JSON when it is
    /// JSON, else as a string (`[DONE]`). A frame without data (a comment, a keep-alive) is
    /// skipped; a frame without a name is a `message`.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<(String, Value)> {
        self.buffer.extend_from_slice(bytes);
        let mut frames = Vec::new();
        while let Some((end, separator)) = frame_end(&self.buffer) {
            let frame: Vec<u8> = self.buffer.drain(..end + separator).collect();
            let frame = String::from_utf8_lossy(&frame[..end]);
            let (mut name, mut data) = ("message".to_owned(), Vec::new());
            for line in frame.lines() {
                if let Some(value) = line.strip_prefix("event:") {
                    name = value.trim().to_owned();
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push(value.strip_prefix(' ').unwrap_or(value));
                }
            }
            if !data.is_empty() {
                let data = data.join("\n");
                let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
                frames.push((name, data));
            }
        }
        frames
    }
}

/// Where the first frame ends and how long its separator is (`\n\n` or `\r\n\r\n`).
fn frame_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|p| (p, 2));
    let crlf = buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| (p, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames_are_read_across_chunk_boundaries() {
        let mut frames = Frames::default();
        let stream = b"event: stdout\nid: 3:0\ndata: {\"from\":0,\"to\":3,\"chunk\":\"hi\\n\"}\n\n: keep-alive\n\nevent: end\r\ndata: {\"reason\":\"terminal\"}\r\n\r\ndata: [DONE]\n\n";
        let mut got = Vec::new();
        for piece in stream.chunks(7) {
            got.extend(frames.push(piece));
        }
        assert_eq!(
            got,
            vec![
                (
                    "stdout".into(),
                    json!({"from": 0, "to": 3, "chunk": "hi\n"})
                ),
                ("end".into(), json!({"reason": "terminal"})),
                ("message".into(), json!("[DONE]")),
            ]
        );
    }
}
