//! The chats under way, so a reader of a session's events can follow one as it happens.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::broadcast;

use super::session::Stored;

/// An event as a follower gets it: the event, and the `seq` of the last stored event before it
/// (a delta has no `seq` of its own; this says which stored events it comes after).
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    pub stored: Stored,
    pub after_seq: u64,
}

impl Published {
    /// Whether a reader that has seen up to `seen` still needs it: a stored event it has not
    /// seen, or a delta that follows what it has seen.
    pub fn news_after(&self, seen: u64) -> bool {
        if self.stored.seq == 0 {
            self.after_seq >= seen
        } else {
            self.stored.seq > seen
        }
    }
}

/// Events a follower may fall behind by before it reads the rest from the log.
const CAPACITY: usize = 1024;

/// The chat under way on each session.
#[derive(Debug, Default)]
pub struct Live {
    chats: Mutex<HashMap<String, broadcast::Sender<Published>>>,
}

impl Live {
    /// Registers the chat that now holds session `id`; its events go to the returned sender.
    pub fn start(&self, id: &str) -> broadcast::Sender<Published> {
        let (sender, _) = broadcast::channel(CAPACITY);
        self.chats
            .lock()
            .expect("live chats lock")
            .insert(id.to_owned(), sender.clone());
        sender
    }

    /// The chat on session `id` is over.
    pub fn end(&self, id: &str) {
        self.chats.lock().expect("live chats lock").remove(id);
    }

    /// The events of the chat under way on session `id`, if there is one.
    pub fn follow(&self, id: &str) -> Option<broadcast::Receiver<Published>> {
        self.chats
            .lock()
            .expect("live chats lock")
            .get(id)
            .map(broadcast::Sender::subscribe)
    }
}
