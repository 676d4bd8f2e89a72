//! HTML text: every name from the store is escaped here, and invisible or direction-changing
//! characters are shown as their code points so a key cannot pass for another.

use std::fmt::Write;

/// Text safe in element content and in quoted attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A bucket or key name as text: escaped, with controls, bidi overrides and zero-width
/// characters made visible (`⟨U+202E⟩`), so `evil\u{202E}gpj.exe` does not read as `evilexe.jpg`.
pub fn name(text: &str) -> String {
    marked(text, "span")
}

/// [`name`] inside SVG `<text>`, where the code points are `<tspan>`s.
pub fn svg_name(text: &str) -> String {
    marked(text, "tspan")
}

fn marked(text: &str, tag: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if invisible(c) {
            let _ = write!(out, "<{tag} class=\"cp\">⟨U+{:04X}⟩</{tag}>", c as u32);
        } else {
            out.push_str(&esc(c.encode_utf8(&mut [0; 4])));
        }
    }
    out
}

/// A value as a block of text: `name` line by line, so line breaks stay line breaks.
pub fn value(text: &str) -> String {
    text.split('\n').map(name).collect::<Vec<_>>().join("\n")
}

fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c as u32,
            0x00AD | 0x034F | 0x061C | 0x115F | 0x1160 | 0x17B4 | 0x17B5 | 0x180E
            | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F
            | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFFB | 0xE0000..=0xE0FFF)
}

/// `path?a=1&b=2`, each value form-encoded.
pub fn link(path: &str, params: &[(&str, &str)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (key, value) in params {
        query.append_pair(key, value);
    }
    let query = query.finish();
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    }
}

/// Byte counts for people.
pub fn size(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A form that posts one change: its CSRF token and hidden fields, then `inner` (its button).
pub fn form(action: &str, csrf: &str, fields: &[(&str, &str)], inner: &str) -> String {
    let mut out = format!(
        "<form method=\"post\" action=\"{}\"><input type=\"hidden\" name=\"_csrf\" value=\"{}\">",
        esc(action),
        esc(csrf)
    );
    for (field, value) in fields {
        let _ = write!(
            out,
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
            esc(field),
            esc(value)
        );
    }
    out.push_str(inner);
    out.push_str("</form>");
    out
}

/// A posting button; with `confirm`, the page script asks first.
pub fn button(label: &str, class: &str, confirm: Option<&str>) -> String {
    match confirm {
        Some(question) => format!(
            "<button class=\"{}\" data-confirm=\"{}\">{}</button>",
            esc(class),
            esc(question),
            esc(label)
        ),
        None => format!("<button class=\"{}\">{}</button>", esc(class), esc(label)),
    }
}

pub struct Page<'a> {
    pub title: &'a str,
    /// The signed-in key and its CSRF token, for the header and scripts.
    pub session: Option<(&'a str, &'a str)>,
    /// An admin (root-key) session: its pages are in the menu too.
    pub admin: bool,
    pub flash: Option<(bool, &'a str)>,
    pub body: String,
}

impl Page<'_> {
    pub fn render(&self) -> String {
        let mut out = String::from("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">");
        out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
        let _ = write!(out, "<title>{} · pgvs3 console</title>", esc(self.title));
        out.push_str("<link rel=\"stylesheet\" href=\"/static/console.css\">");
        out.push_str("<script type=\"module\" src=\"/static/console.js\"></script>");
        if let Some((_, csrf)) = self.session {
            let _ = write!(out, "<meta name=\"csrf-token\" content=\"{}\">", esc(csrf));
        }
        out.push_str("</head><body><header><a class=\"brand\" href=\"/\">pgvs3 console</a>");
        if let Some((key, csrf)) = self.session {
            out.push_str("<nav><a href=\"/buckets\">Buckets</a><a href=\"/keys\">Keys</a>");
            if self.admin {
                out.push_str(
                    "<a href=\"/jobs\">Jobs</a><a href=\"/health\">Health</a><a href=\"/access-keys\">Access keys</a>",
                );
            }
            out.push_str("</nav>");
            let _ = write!(out, "<span class=\"who\">{}</span>", name(key));
            out.push_str(&form("/logout", csrf, &[], "<button id=\"logout\">Sign out</button>"));
        }
        out.push_str("</header><main>");
        if let Some((ok, text)) = self.flash {
            let _ = write!(
                out,
                "<p class=\"flash {}\" role=\"status\">{}</p>",
                if ok { "ok" } else { "error" },
                name(text)
            );
        }
        out.push_str(&self.body);
        out.push_str("</main></body></html>");
        out
    }
}
