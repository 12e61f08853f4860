//! HTML, escaped by construction. Every value from the database (a
//! payload, a header, an error, an event id, a provider's name) is
//! hostile input: it reaches a page only through `Html::text` or
//! `Html::attr`, which escape it. Markup is written with `Html::raw`, and
//! only ever with literals of this program.

use std::fmt::Write;

/// A page or a fragment being written.
#[derive(Default)]
pub struct Html(String);

/// Escape text for an HTML element's content or a quoted attribute value.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than tab and newlines have no business
            // in a page: shown as the replacement character.
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encode a value for a URL's query string or path segment.
pub fn url_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

impl Html {
    pub fn new() -> Self {
        Html(String::new())
    }

    /// Markup of this program's own.
    pub fn raw(&mut self, markup: &'static str) -> &mut Self {
        self.0.push_str(markup);
        self
    }

    /// A value, escaped.
    pub fn text(&mut self, value: impl std::fmt::Display) -> &mut Self {
        self.0.push_str(&escape(&value.to_string()));
        self
    }

    /// `name="value"`, the value escaped (names are this program's).
    pub fn attr(&mut self, name: &'static str, value: impl std::fmt::Display) -> &mut Self {
        let _ = write!(self.0, " {name}=\"{}\"", escape(&value.to_string()));
        self
    }

    /// A fragment already built.
    pub fn push(&mut self, fragment: Html) -> &mut Self {
        self.0.push_str(&fragment.0);
        self
    }

    /// A link: `href` built from this program's path and escaped values.
    pub fn link(&mut self, href: &str, label: impl std::fmt::Display) -> &mut Self {
        self.raw("<a")
            .attr("href", href)
            .raw(">")
            .text(label)
            .raw("</a>")
    }

    /// A table of rows of cells (each already a fragment), with headings.
    pub fn table(&mut self, headings: &[&'static str], rows: Vec<Vec<Html>>) -> &mut Self {
        self.raw("<table><thead><tr>");
        for heading in headings {
            self.raw("<th>").raw(heading).raw("</th>");
        }
        self.raw("</tr></thead><tbody>");
        if rows.is_empty() {
            self.raw("<tr><td class=\"none\"")
                .attr("colspan", headings.len())
                .raw(">none</td></tr>");
        }
        for row in rows {
            self.raw("<tr>");
            for cell in row {
                self.raw("<td>").push(cell).raw("</td>");
            }
            self.raw("</tr>");
        }
        self.raw("</tbody></table>");
        self
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// A fragment holding one escaped value.
pub fn cell(value: impl std::fmt::Display) -> Html {
    let mut h = Html::new();
    h.text(value);
    h
}

/// A fragment holding an optional value (`—` when absent).
pub fn maybe(value: Option<impl std::fmt::Display>) -> Html {
    match value {
        Some(v) => cell(v),
        None => cell("—"),
    }
}

/// A row of values from the database as cells, each escaped.
pub fn cells(values: &[Option<String>]) -> Vec<Html> {
    values.iter().map(|v| maybe(v.as_ref())).collect()
}

/// Rows of values as a table's rows of cells.
pub fn grid(rows: &[Vec<Option<String>>]) -> Vec<Vec<Html>> {
    rows.iter().map(|row| cells(row)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_character_that_could_open_markup_is_escaped() {
        assert_eq!(
            escape(r#"<script>alert("x")</script>&'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
        assert_eq!(
            escape("\"><img src=x onerror=alert(1)>"),
            "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
        );
        assert_eq!(escape("a\u{0}b\u{1b}c\td"), "a\u{fffd}b\u{fffd}c\td");
        assert_eq!(escape("héllo ✓"), "héllo ✓");
    }

    #[test]
    fn attributes_and_text_go_through_the_same_escaping() {
        let mut h = Html::new();
        h.raw("<a")
            .attr("href", "/x?a=\"b\"&c")
            .raw(">")
            .text("<b>")
            .raw("</a>");
        assert_eq!(
            h.into_string(),
            "<a href=\"/x?a=&quot;b&quot;&amp;c\">&lt;b&gt;</a>"
        );
    }

    #[test]
    fn urls_encode_everything_but_unreserved_characters() {
        assert_eq!(url_encode("evt 1/\"<>&?#"), "evt%201%2F%22%3C%3E%26%3F%23");
        assert_eq!(url_encode("stripe-2_x.y~"), "stripe-2_x.y~");
        assert_eq!(url_encode("é"), "%C3%A9");
    }

    #[test]
    fn an_empty_table_says_none() {
        let mut h = Html::new();
        h.table(&["a", "b"], vec![]);
        assert!(h.into_string().contains("colspan=\"2\">none"));
    }
}
