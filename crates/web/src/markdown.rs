//! Markdown as HTML a page may show: a skill's `SKILL.md`, an agent's answer. The text comes
//! from skill authors and models, so the HTML is sanitised (no scripts, handlers, styles or
//! frames; links open without a referrer) before it reaches a page.

use pulldown_cmark::{Options, Parser, html};

/// `text` rendered and sanitised. A leading YAML front matter block (`---` … `---`, as
/// `SKILL.md` files begin) is left out: it is metadata, shown elsewhere.
pub fn to_html(text: &str) -> String {
    render(without_front_matter(text), &[])
}

/// What a model or a skill said, rendered and sanitised as [`to_html`] does, whole (a line of
/// `---` at its start is its own) and without images: a page would fetch them from this origin
/// for whoever wrote them.
pub fn said_to_html(text: &str) -> String {
    render(text, &["img"])
}

fn render(body: &str, removed: &[&str]) -> String {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES;
    let mut rendered = String::with_capacity(body.len() * 3 / 2);
    html::push_html(&mut rendered, Parser::new_ext(body, options));
    ammonia::Builder::default()
        .link_rel(Some("noopener noreferrer nofollow"))
        .rm_tags(removed.iter().copied())
        .clean(&rendered)
        .to_string()
}

fn without_front_matter(text: &str) -> &str {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return text;
    };
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        offset += line.len();
        if line.trim_end() == "---" {
            return &rest[offset..];
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_renders_without_what_could_run() {
        let html = to_html(
            "---\nname: demo\n---\n# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n\
             <script>alert(1)</script><img src=x onerror=alert(1)>\n\n\
             [x](javascript:alert(1)) [ok](https://example.com)\n",
        );
        assert!(html.contains("<h1>Title</h1>"), "{html}");
        assert!(html.contains("<table>"), "{html}");
        assert!(
            !html.contains("name: demo"),
            "front matter left out: {html}"
        );
        for banned in ["<script", "onerror", "javascript:"] {
            assert!(!html.contains(banned), "{banned} in {html}");
        }
        assert!(
            html.contains(
                r#"<a href="https://example.com" rel="noopener noreferrer nofollow">ok</a>"#
            ),
            "{html}"
        );
        assert_eq!(without_front_matter("---\nunclosed"), "---\nunclosed");
    }

    #[test]
    fn what_was_said_is_kept_whole_and_shows_no_image() {
        let html = said_to_html("---\nkept\n---\n![pixel](/v1/jobs) **bold**");
        assert!(
            html.contains("kept") && html.contains("<strong>bold</strong>"),
            "{html}"
        );
        assert!(!html.contains("<img"), "{html}");
    }
}
