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
        // Looking resumes where the last push stopped (less a separator's length) and the
        // buffer is cut once: a read holding many frames costs its length, not its length
        // times its frames (3 MB of deltas read at once took minutes).
        let mut from = self.buffer.len().saturating_sub(3);
        self.buffer.extend_from_slice(bytes);
        let (mut frames, mut start) = (Vec::new(), 0);
        while let Some((end, separator)) = frame_end(&self.buffer, from) {
            let frame = String::from_utf8_lossy(&self.buffer[start..end]);
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
            start = end + separator;
            from = start;
        }
        self.buffer.drain(..start);
        frames
    }
}

/// Where the first frame ending at or after `from` ends, and how long its separator is
/// (`\n\n` or `\r\n\r\n`).
fn frame_end(buffer: &[u8], from: usize) -> Option<(usize, usize)> {
    (from..buffer.len()).find_map(|at| {
        let rest = &buffer[at..];
        if rest.starts_with(b"\n\n") {
            Some((at, 2))
        } else if rest.starts_with(b"\r\n\r\n") {
            Some((at, 4))
        } else {
            None
        }
    })
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
        for piece in [1, 2, 3, 4, 5, stream.len()] {
            let mut frames = Frames::default();
            let again: Vec<_> = stream.chunks(piece).flat_map(|c| frames.push(c)).collect();
            assert_eq!(again, got, "read {piece} bytes at a time");
        }
    }

    #[test]
    fn many_frames_read_at_once_cost_their_length() {
        let frame = b"event: d\ndata: {\"t\":\"0123456789ab\"}\n\n";
        let body: Vec<u8> = frame
            .iter()
            .copied()
            .cycle()
            .take(frame.len() * 200_000)
            .collect();
        // Read quadratically, this took minutes.
        let frames = Frames::default().push(&body);
        assert_eq!(frames.len(), 200_000);
        assert!(
            frames
                .iter()
                .all(|(name, data)| name == "d" && data["t"] == "0123456789ab")
        );
    }
}
