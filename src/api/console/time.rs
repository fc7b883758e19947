//! Times as people read them: how long ago, and how long something took, in the page's
//! language (the exact moment goes in a tooltip beside them).

use super::Lang;
use crate::clock::Timestamp;

/// "just now", "5 min ago", "3 h ago", "2 d ago" (刚刚, 5 分钟前, …); a moment in the future
/// (another node's clock) reads as now.
pub fn ago(l: Lang, at: Timestamp) -> String {
    let seconds = Timestamp::now().duration_since(at).as_secs();
    let (n, unit) = match seconds {
        0..45 => return l.tr("time.now").to_owned(),
        45..5400 => (seconds.div_ceil(60).max(1), "min"),
        5400..172_800 => (seconds / 3600, "h"),
        _ => (seconds / 86_400, "d"),
    };
    match (l, unit) {
        (Lang::Zh, "min") => format!("{n} 分钟前"),
        (Lang::Zh, "h") => format!("{n} 小时前"),
        (Lang::Zh, _) => format!("{n} 天前"),
        (Lang::En, unit) => format!("{n} {unit} ago"),
    }
}

/// A duration from milliseconds: "850 ms", "4.2 s", "3 min 05 s", "2 h 07 min".
pub fn span(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms} ms"),
        1000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {:02} s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{} h {:02} min", ms / 3_600_000, ms / 60_000 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_read_as_people_say_them() {
        let back = |s| Timestamp::before(Duration::from_secs(s));
        assert_eq!(ago(Lang::En, back(3)), "just now");
        assert_eq!(
            ago(Lang::En, Timestamp::after(Duration::from_secs(30))),
            "just now"
        );
        assert_eq!(ago(Lang::En, back(300)), "5 min ago");
        assert_eq!(ago(Lang::Zh, back(300)), "5 分钟前");
        assert_eq!(ago(Lang::En, back(3 * 3600 + 10)), "3 h ago");
        assert_eq!(ago(Lang::Zh, back(3 * 86_400)), "3 天前");
        assert_eq!(span(850), "850 ms");
        assert_eq!(span(4_240), "4.2 s");
        assert_eq!(span(185_000), "3 min 05 s");
        assert_eq!(span(2 * 3_600_000 + 7 * 60_000), "2 h 07 min");
    }
}
